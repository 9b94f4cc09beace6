"""The crossEncoder reranker on the real bundled model (ms-marco-MiniLM-L-12-v2, int8 ONNX)."""

from dataclasses import replace

import pytest

from gateway.embedding.models import CROSS_ENCODER
from gateway.errors import ConfigError
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.stages import cross_encoder
from gateway.retrieval.stages.cross_encoder import (
    QUERY_TOKENS,
    CrossEncoderReranker,
    model_files,
    passage_text,
    shared_model,
)
from gateway.retrieval.stages.rerank import RerankStage
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import CrossEncoderParams, RerankParams
from tests.retrieval.stages.hits import make_hit

QUESTION = "How many people live in Berlin?"
RELEVANT = "Berlin has a population of 3,520,031 registered inhabitants in an area of 891.82 square kilometers."
IRRELEVANT = "New York City is famous for the Metropolitan Museum of Art."


def params(**values) -> CrossEncoderParams:
    return CrossEncoderParams.model_validate(values)


def test_the_model_ships_in_site_packages():
    model, tokenizer = model_files()
    assert model.name == "model.onnx" and tokenizer.name == "tokenizer.json"
    assert shared_model() is shared_model()  # one session per process


def test_a_relevant_passage_scores_above_an_irrelevant_one():
    relevant, irrelevant = shared_model().score(QUESTION, [RELEVANT, IRRELEVANT])
    # The model card's example pair: about +9 and -11 logits.
    assert relevant > 5 > -5 > irrelevant


def test_batching_and_padding_do_not_change_the_ranking():
    passages = [IRRELEVANT, RELEVANT * 6, "Berlin is the capital of Germany.", "Paris has two million people."]
    one_batch = shared_model().score(QUESTION, passages, batch_size=16)
    one_by_one = shared_model().score(QUESTION, passages, batch_size=1)
    assert sorted(range(4), key=lambda i: -one_batch[i]) == sorted(range(4), key=lambda i: -one_by_one[i])
    assert one_batch == pytest.approx(one_by_one, abs=0.5)  # int8 activations are quantised per batch


def test_pairs_are_cut_to_max_tokens_keeping_the_passage_start():
    model = shared_model()
    long_question = "berlin " * 200
    (ids, types), = model.pairs(long_question, ["alpha " * 1000], max_tokens=128)
    assert len(ids) == len(types) == 128
    question_part = types.count(0)
    assert question_part == min(QUERY_TOKENS, 128 // 2) + 2  # [CLS] question [SEP]
    (short_ids, _), = model.pairs(QUESTION, ["alpha beta"], max_tokens=128)
    assert short_ids[-1] == ids[-1]  # [SEP] closes both
    alpha = model.pairs("x", ["alpha"], max_tokens=32)[0][0][3]
    assert ids[question_part] == alpha  # the passage is read from its start


async def test_rerank_stage_puts_the_relevant_hit_first_and_records_the_signal():
    hits = [make_hit("nyc", 0.9, IRRELEVANT), make_hit("berlin", 0.5, RELEVANT, title="Berlin"),
            make_hit("tail", 0.1, "Paris has two million people.")]
    reranker = CrossEncoderReranker(params(topK=2, blend="replace"))
    stage = RerankStage(RerankParams.model_validate({"chain": ["crossEncoder"]}), [reranker])
    handle = StageHandle(3)
    out = await stage.apply(StageRequest(QUESTION, 3), hits, handle)
    # Only the top 2 are re-scored; the third follows them, not re-scored (rest: keep).
    assert [h.source_id for h in out] == ["berlin", "nyc", "tail"] and len(out[2].provenance.scores) == 1
    signal = out[0].provenance.scores[-1]
    assert signal.signal == "rerank:crossEncoder" and signal.rank == 1 and signal.raw > 5
    assert handle.detail["cross_encoder_max_tokens"] == 256
    assert passage_text(hits[1]) == f"Berlin\n{RELEVANT}"


def test_a_missing_model_package_fails_at_construction(monkeypatch):
    elsewhere = tuple(replace(f, package="no_such_model_package") for f in CROSS_ENCODER.files)
    monkeypatch.setattr(cross_encoder, "CROSS_ENCODER", replace(CROSS_ENCODER, files=elsewhere))
    with pytest.raises(ConfigError, match="package 'no_such_model_package' is not installed; it carries the "
                                          "cross-encoder/ms-marco-MiniLM-L-12-v2"):
        CrossEncoderReranker(params())


def test_early_exit_is_read_from_the_parameters():
    assert CrossEncoderReranker(params()).skip_if_confident is None
    gate = CrossEncoderReranker(params(skipIfConfident={"signalsAgree": True, "scoreGap": 0.2})).skip_if_confident
    assert gate.signals_agree and gate.score_gap == 0.2
