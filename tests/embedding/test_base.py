"""The query-embedding cache is per tenant (issue 9, item 5: a shared cache is a timing side channel)."""

import time

import numpy as np

from gateway.embedding.base import CachedEmbedder
from tests.conftest import Gateway


class Counting:
    name = "counting"
    dim = 2

    def __init__(self) -> None:
        self.calls: list[str] = []

    def embed_documents(self, texts):
        return np.ones((len(texts), 2), dtype=np.float32)

    def embed_query(self, text: str, tenant: str = "") -> np.ndarray:
        self.calls.append(text)
        return np.ones(2, dtype=np.float32)


def test_one_tenants_cached_query_is_a_miss_for_another():
    inner = Counting()
    cached = CachedEmbedder(inner, size=16)
    cached.embed_query("quarterly merger plan", "acme")
    cached.embed_query("quarterly merger plan", "acme")
    cached.embed_query("quarterly merger plan", "globex")
    assert inner.calls == ["quarterly merger plan"] * 2
    assert (cached.hits, cached.misses) == (1, 2)


def test_bundled_query_token_cache_is_per_tenant(embedder):
    inner = embedder.inner
    text = "is the token cache shared between tenants"
    inner.embed_query(text, "acme")
    mine = inner.token_vectors(text, "acme")
    assert inner.token_vectors(text, "acme") is mine          # the same tenant reuses its pass
    theirs = inner.token_vectors(text, "globex")
    assert theirs is not mine and np.allclose(theirs, mine, atol=1e-3)


def test_a_search_by_one_tenant_does_not_warm_the_cache_for_another(gateway: Gateway):
    embedder = gateway.app.state.gateway.runtime.embedder
    query = f"side channel probe {time.time_ns()}"
    search = '{ search(input: {query: "%s", collection: "docs"}) { hits { chunk { sourceId } } } }' % query
    before = embedder.misses
    gateway.data(search, key="acme-reader")
    gateway.data(search, key="globex-reader")
    assert embedder.misses - before == 2  # globex's identical query was embedded, not served from acme's entry
    gateway.data(search, key="globex-reader")
    assert embedder.misses - before == 2  # and is cached for globex itself
