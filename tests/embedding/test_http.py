import numpy as np
import pytest

from gateway.embedding.http import OpenAIEmbedder
from gateway.errors import ConfigError, UpstreamUnavailable
from tests.loopback import loopback_server


def embeddings(path, body):
    data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(body["input"])]
    return 200, {"data": list(reversed(data)), "model": body["model"]}


def test_calls_endpoint_batches_and_normalises():
    with loopback_server(embeddings) as (url, seen):
        embedder = OpenAIEmbedder(url, "text-embed", 3, api_key="sk-test", batch_size=2)
        vectors = embedder.embed_documents(["a", "bbb", "cc"])
    assert [r["path"] for r in seen] == ["/v1/embeddings", "/v1/embeddings"]
    assert seen[0]["auth"] == "Bearer sk-test" and seen[0]["body"]["input"] == ["a", "bbb"]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[1][0] > vectors[0][0]  # order restored from the `index` field


def test_wrong_dimension_and_errors_are_upstream_errors():
    with loopback_server(embeddings) as (url, _):
        with pytest.raises(UpstreamUnavailable, match=r"returned shape \(1, 3\); expected \(1, 5\)"):
            OpenAIEmbedder(url, "m", 5).embed_query("x")
    with loopback_server(lambda p, b: (500, {"error": "boom"})) as (url, _):
        with pytest.raises(UpstreamUnavailable, match="embedding endpoint .* failed"):
            OpenAIEmbedder(url, "m", 3).embed_query("x")


def test_bad_configuration_is_refused():
    with pytest.raises(ConfigError, match="must start with http"):
        OpenAIEmbedder("localhost:8080", "m", 3)
