"""Rerankers: blending, late interaction on the real model and a real milvus-lite store, HTTP, score."""

from dataclasses import replace

import pytest

from gateway.errors import InvalidInput, UpstreamUnavailable
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.hit import SignalScore
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.retrieval.stages.rerank import (
    HttpReranker,
    LateInteractionReranker,
    RerankStage,
    ScoreReranker,
    blend,
    maxsim,
    maxsim_many,
)
from gateway.retrieval.trace import StageHandle
from gateway.storage.token_vectors import TokenTarget, TokenVectorStore
from gateway.tenancy.pipelines import (
    Blend,
    HttpRerankParams,
    LateInteractionParams,
    RerankParams,
    ScoreRerankParams,
    SkipIfConfidentParams,
)
from tests.conftest import make_ref
from tests.loopback import loopback_server
from tests.retrieval.stages.hits import make_hit

import numpy as np


def reranker(**params):
    return ScoreReranker(ScoreRerankParams.model_validate({"field": "metadata.votes", **params}))


def test_blend_replace_reorders_by_the_new_score_and_records_the_signal():
    hits = [make_hit("a", 0.9), make_hit("b", 0.5), make_hit("c", 0.1)]
    out = blend(hits, [0.2, 0.7, 0.4], reranker(blend="replace"))
    assert [(h.source_id, h.score) for h in out] == [("b", 0.7), ("c", 0.4), ("a", 0.2)]
    signal = out[0].provenance.scores[-1]
    assert (signal.signal, signal.raw, signal.rank) == ("rerank:score", 0.7, 1)
    assert hits[0].score == 0.9  # inputs untouched


def test_blend_weighted_is_min_max_of_both():
    hits = [make_hit("a", 1.0), make_hit("b", 0.5), make_hit("c", 0.0)]
    out = {h.source_id: h.score for h in blend(hits, [0.0, 10.0, 5.0], reranker(blend="weighted", weight=0.25))}
    assert out == pytest.approx({"a": 0.75 * 1.0 + 0.25 * 0.0, "b": 0.75 * 0.5 + 0.25 * 1.0, "c": 0.25 * 0.5})


def test_blend_rrf_uses_both_ranks():
    hits = [make_hit("a", 0.9), make_hit("b", 0.5)]
    out = {h.source_id: h.score for h in blend(hits, [1.0, 2.0], reranker(blend="rrf", weight=0.5))}
    assert out == pytest.approx({"a": 0.5 / 61 + 0.5 / 62, "b": 0.5 / 62 + 0.5 / 61})


def test_missing_scores_are_neutral():
    hits = [make_hit("a", 1.0), make_hit("b", 0.0)]
    out = {h.source_id: h.score for h in blend(hits, [None, 4.0], reranker(blend="weighted", weight=0.5))}
    assert out["a"] == pytest.approx(1.0)  # kept its own normalised score on the reranker's side
    assert out["b"] == pytest.approx(0.5)


async def test_score_reranker_missing_policies():
    hits = [make_hit("a", 0.9, metadata={"votes": 3}), make_hit("b", 0.1, metadata={})]
    handle = StageHandle(2)
    assert await reranker().scores(StageRequest("q", 2), hits, handle) == [3.0, None]
    assert "without numeric 'metadata.votes'" in handle.warnings[0]
    assert await reranker(missing="zero").scores(StageRequest("q", 2), hits, StageHandle(2)) == [3.0, 0.0]
    with pytest.raises(InvalidInput, match="has no numeric 'metadata.votes'"):
        await reranker(missing="error").scores(StageRequest("q", 2), hits, StageHandle(2))
    with pytest.raises(InvalidInput, match="is str, not a number"):
        await reranker().scores(StageRequest("q", 1), [make_hit("c", 1, metadata={"votes": "many"})], StageHandle(1))


def test_maxsim_is_the_mean_of_each_query_tokens_best_match():
    query = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    doc = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float16)
    assert maxsim(query, doc) == pytest.approx((1.0 + 0.8) / 2, abs=1e-3)
    assert maxsim(query, np.zeros((0, 2), dtype=np.float16)) == 0.0


DOCS = [
    Document("cats", "Cats are small domesticated carnivorous mammals that purr and hunt mice.", title="Cats"),
    Document("rust", "Rust prevents data races at compile time through ownership and borrowing.", title="Rust"),
    Document("tea", "Green tea is brewed from unoxidised leaves of Camellia sinensis.", title="Tea"),
]


async def test_late_interaction_on_real_hits_with_token_vectors_from_ingest(lite_store, embedder, tmp_path):
    ref = make_ref("latein")
    tokens = TokenVectorStore(lite_store)
    lite_store.drop(ref.scope)
    report = ingest_documents(lite_store, embedder, ref, DOCS, progress=False, tokens=TokenTarget(tokens, 512))
    assert report.token_vectors_written == 3 and tokens.count(ref.scope) == 3
    hits = await CollectionRetriever(lite_store, embedder, ref).retrieve(
        Query("how does the borrow checker stop data races"), SearchOptions(mode=Mode.SPARSE, limit=3))
    late = LateInteractionReranker(LateInteractionParams(), embedder.inner, tokens)
    handle = StageHandle(len(hits))
    scores = await late.scores(StageRequest("how does the borrow checker stop data races", 3), hits, handle)
    assert handle.detail["token_vectors_computed"] == 0  # all precomputed at ingest
    best = max(zip(scores, hits), key=lambda pair: pair[0])[1]
    assert best.source_id == "rust" and all(-1 <= s <= 1 for s in scores)
    # Without the store's rows they are computed from the hit text, giving the same scores.
    tokens.drop(ref.scope)
    handle = StageHandle(len(hits))
    again = await late.scores(StageRequest("how does the borrow checker stop data races", 3), hits, handle)
    assert handle.detail["token_vectors_computed"] == len(hits) and again == pytest.approx(scores, abs=1e-3)
    assert tokens.count(ref.scope) == len(hits)  # and stored for the next request


async def test_rerank_stage_chains_and_with_rest_drop_cuts_to_top_k(embedder, tmp_path):
    params = RerankParams.model_validate({"chain": [{"score": {"field": "metadata.votes", "topK": 3, "blend": "replace"}},
                                                    {"score": {"field": "metadata.votes", "topK": 2}}],
                                          "rest": "drop"})
    stage = RerankStage(params, [ScoreReranker(c.params) for c in params.chain])
    hits = [make_hit(s, 1 - i / 10, metadata={"votes": v}) for i, (s, v) in enumerate([("a", 1), ("b", 5), ("c", 3), ("d", 9)])]
    handle = StageHandle(4)
    out = await stage.apply(StageRequest("q", 5), hits, handle)
    assert stage.depth == 3 and [h.source_id for h in out] == ["b", "c"]
    # Each reranker's signal has its own name: the second `score` is `rerank:score:2`.
    assert [s.signal for s in out[0].provenance.scores] == ["dense", "rerank:score", "rerank:score:2"]
    # topK 2 under limit 5: the two dropped hits are named, not lost in silence.
    assert handle.detail["dropped"] == 2
    assert handle.warnings == ["2 hit(s) below the rerankers' topK were dropped, leaving 2 of the 5 asked for: "
                               "raise topK to at least the limit to keep them (support/a/c0, support/d/c0)"]


async def test_rerank_stage_keeps_the_hits_below_top_k_after_the_rescored_ones_by_default():
    # A rerank of the top 2 of 4 hits used to return 2 hits: Recall@100 fell to what topK held.
    params = RerankParams.model_validate({"chain": [{"score": {"field": "metadata.votes", "topK": 2,
                                                               "blend": "replace"}}]})
    stage = RerankStage(params, [ScoreReranker(c.params) for c in params.chain])
    hits = [make_hit(s, score, metadata={"votes": v})
            for s, score, v in [("a", 0.9, 1), ("b", 0.8, 5), ("c", 0.5, 9), ("d", 0.4, 0)]]
    handle = StageHandle(4)
    out = await stage.apply(StageRequest("q", 4), hits, handle)
    # b and a are re-scored (votes 5 and 1); c and d follow in their incoming order although c has
    # more votes: the reranker never saw them.
    assert [h.source_id for h in out] == ["b", "a", "c", "d"]
    assert [h.score for h in out[:2]] == [5.0, 1.0]
    # The rest keep their gap (0.1) and sit under the last re-scored hit, so the list stays sorted.
    assert out[1].score > out[2].score > out[3].score and out[2].score - out[3].score == pytest.approx(0.1)
    assert out[2].score == pytest.approx(1.0)
    assert [s.signal for s in out[2].provenance.scores] == ["dense"]  # not re-scored, no rerank signal
    assert handle.detail["dropped"] == 0 and handle.detail["rest"] == "keep" and handle.warnings == []


async def test_rerank_stage_keeps_the_rest_after_a_round_robin_merge():
    params = RerankParams.model_validate({"merge": "roundRobin", "chain": [
        {"score": {"field": "metadata.votes", "topK": 2, "blend": "replace"}},
        {"score": {"field": "score", "topK": 2, "blend": "replace"}}]})
    stage = RerankStage(params, [ScoreReranker(c.params) for c in params.chain])
    hits = [make_hit(s, score, metadata={"votes": v}) for s, score, v in [("a", 0.9, 1), ("b", 0.8, 5), ("c", 0.5, 9)]]
    out = await stage.apply(StageRequest("q", 3), hits, StageHandle(3))
    assert [h.source_id for h in out] == ["b", "a", "c"] and out[1].score > out[2].score


async def test_http_reranker_speaks_the_rerank_shape():
    def service(path, body):
        assert body["query"] == "q" and body["top_n"] == 2 and body["model"] == "bge"
        return 200, {"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}]}

    with loopback_server(service) as (url, seen):
        params = HttpRerankParams.model_validate({"url": f"{url}/rerank", "model": "bge"})
        scores = await HttpReranker(params, api_key="k").scores(
            StageRequest("q", 2), [make_hit("a", 1, "first"), make_hit("b", 0.5, "second")], StageHandle(2))
    assert scores == [0.2, 0.9]
    assert seen[0]["path"] == "/v1/rerank" and seen[0]["body"]["documents"] == ["first", "second"]
    assert seen[0]["auth"] == "Bearer k"


@pytest.mark.parametrize("payload", [{"results": [{"index": 7, "relevance_score": 1}]}, {"data": []},
                                     {"results": [{"index": 0, "relevance_score": "high"}]}])
async def test_http_reranker_rejects_malformed_answers(payload):
    with loopback_server(lambda path, body: (200, payload)) as (url, _):
        params = HttpRerankParams.model_validate({"url": f"{url}/rerank"})
        with pytest.raises(UpstreamUnavailable, match="results"):
            await HttpReranker(params).scores(StageRequest("q", 1), [make_hit("a", 1)], StageHandle(1))


def test_maxsim_many_matches_one_at_a_time_and_handles_empty_documents():
    rng = np.random.default_rng(7)
    query = rng.normal(size=(4, 8)).astype(np.float32)
    docs = [rng.normal(size=(n, 8)).astype(np.float16) for n in (3, 1, 6)]
    docs.insert(1, np.zeros((0, 8), dtype=np.float16))
    many = maxsim_many(query, docs)
    single = [float((query @ d.astype(np.float32).T).max(axis=1).mean()) if len(d) else 0.0 for d in docs]
    assert many == pytest.approx(single, abs=1e-5) and many[1] == 0.0


async def test_round_robin_merge_interleaves_each_rerankers_own_ranking():
    params = RerankParams.model_validate({"merge": "roundRobin", "chain": [
        {"score": {"field": "metadata.votes", "topK": 4, "blend": "replace"}},
        {"score": {"field": "score", "topK": 3, "blend": "replace"}}]})
    stage = RerankStage(params, [ScoreReranker(c.params) for c in params.chain])
    hits = [make_hit(s, 1 - i / 10, metadata={"votes": v}) for i, (s, v) in enumerate([("a", 1), ("b", 5), ("c", 3), ("d", 9)])]
    handle = StageHandle(4)
    out = await stage.apply(StageRequest("q", 5), hits, handle)
    # By votes: d, b, c, a. By incoming score (top 3): a, b, c. Interleaved: d, a, b, c.
    assert [h.source_id for h in out] == ["d", "a", "b", "c"]
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)
    assert handle.detail["merge"] == "roundRobin"
    b = out[2]
    # b keeps both rankings' view of it: 2nd by votes (5), 2nd by incoming score (0.9).
    assert [(s.signal, s.raw, s.rank) for s in b.provenance.scores] == [
        ("dense", 0.9, 1), ("rerank:score", 5.0, 2), ("rerank:score", 0.9, 2)]


def test_rerank_merge_is_a_closed_set():
    with pytest.raises(ValueError, match="merge"):
        RerankParams.model_validate({"merge": "zipper", "chain": [{"score": {"field": "score"}}]})


class CountingReranker:
    """Scores each hit by its metadata `votes`, counting calls; early exit as configured."""

    name = "counting"
    top_k = 2
    blend = Blend.REPLACE
    weight = 1.0

    def __init__(self, skip_if_confident: SkipIfConfidentParams | None) -> None:
        self.skip_if_confident = skip_if_confident
        self.calls = 0

    async def scores(self, request, hits, handle):
        self.calls += 1
        return [float(h.metadata["votes"]) for h in hits]


def agreeing(source_id: str, score: float, votes: int, dense: int, sparse: int):
    hit = make_hit(source_id, score, metadata={"votes": votes})
    return replace(hit, provenance=replace(hit.provenance, scores=(SignalScore("dense", 0.5, dense),
                                                                   SignalScore("sparse", 3.0, sparse))))


async def test_early_exit_leaves_a_settled_query_as_it_came_and_the_trace_says_why():
    counting = CountingReranker(SkipIfConfidentParams.model_validate({"signalsAgree": True}))
    stage = RerankStage(RerankParams.model_validate({"chain": ["crossEncoder"]}), [counting])
    settled = [agreeing("a", 0.9, 1, dense=1, sparse=1), agreeing("b", 0.8, 5, dense=2, sparse=2),
               agreeing("c", 0.1, 9, dense=3, sparse=3)]
    handle = StageHandle(3)
    out = await stage.apply(StageRequest("q", 3), settled, handle)
    assert counting.calls == 0 and [h.source_id for h in out] == ["a", "b", "c"]
    assert [len(h.provenance.scores) for h in out] == [2, 2, 2]  # no rerank signal
    assert handle.detail["skip_if_confident"] == {"counting": "skipped: dense and BM25 both rank the first hit first"}

    uncertain = [agreeing("a", 0.9, 1, dense=1, sparse=2), *settled[1:]]
    handle = StageHandle(3)
    out = await stage.apply(StageRequest("q", 3), uncertain, handle)
    assert counting.calls == 1 and [h.source_id for h in out] == ["b", "a", "c"]
    assert handle.detail["skip_if_confident"] == {"counting": "ran: the first hit is dense rank 1, BM25 rank 2"}


async def test_early_exit_in_a_round_robin_merge_keeps_the_incoming_order_as_that_rankers_list():
    counting = CountingReranker(SkipIfConfidentParams.model_validate({"scoreGap": 0.5}))
    stage = RerankStage(RerankParams.model_validate({"chain": ["crossEncoder"], "merge": "roundRobin", "rest": "drop"}),
                        [counting])
    hits = [agreeing("a", 0.9, 1, 1, 1), agreeing("b", 0.3, 5, 2, 2), agreeing("c", 0.1, 9, 3, 3)]
    out = await stage.apply(StageRequest("q", 3), hits, StageHandle(3))
    assert counting.calls == 0 and [h.source_id for h in out] == ["a", "b"]
