"""Early exit: when a reranker's `skipIfConfident` finds a query's incoming top settled."""

from dataclasses import replace

from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.hit import SignalScore
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.retrieval.stages.confidence import Confidence, confidence
from gateway.tenancy.pipelines import SkipIfConfidentParams
from tests.conftest import make_ref
from tests.retrieval.stages.hits import make_hit


def rule(**values) -> SkipIfConfidentParams:
    return SkipIfConfidentParams.model_validate(values)


def ranked(source_id: str, score: float, **ranks: int):
    hit = make_hit(source_id, score)
    return replace(hit, provenance=replace(hit.provenance, scores=tuple(
        SignalScore(signal, 0.5, rank) for signal, rank in ranks.items())))


def test_signals_agree_when_dense_and_bm25_both_rank_the_first_hit_first():
    hits = [ranked("a", 1.0, dense=1, sparse=1), ranked("b", 0.9, dense=2, sparse=3)]
    verdict = confidence(hits, rule(signalsAgree=True))
    assert verdict.settled and verdict.reason == "dense and BM25 both rank the first hit first"


def test_signals_disagree_and_a_single_signal_never_agrees():
    split = [ranked("a", 0.95, dense=1, sparse=3), ranked("b", 0.9, dense=4, sparse=1)]
    verdict = confidence(split, rule(signalsAgree=True))
    assert not verdict.settled and verdict.reason == "the first hit is dense rank 1, BM25 rank 3"
    dense_only = [ranked("a", 0.95, dense=1), ranked("b", 0.9, dense=2)]
    assert confidence(dense_only, rule(signalsAgree=True)).reason == "the first hit is dense rank 1, BM25 rank -"


def test_score_gap_compares_the_first_two_incoming_scores():
    hits = [ranked("a", 0.9, dense=1, sparse=2), ranked("b", 0.6, dense=2, sparse=1)]
    assert confidence(hits, rule(scoreGap=0.3)).settled
    verdict = confidence(hits, rule(scoreGap=0.35))
    assert not verdict.settled and verdict.reason == "score gap between hits 1 and 2 is 0.3000 < 0.35"


def test_any_condition_settles_and_a_miss_names_every_condition():
    hits = [ranked("a", 0.9, dense=2, sparse=1), ranked("b", 0.5, dense=1, sparse=2)]
    assert confidence(hits, rule(signalsAgree=True, scoreGap=0.2)).settled  # the gap holds, the signals do not
    verdict = confidence(hits, rule(signalsAgree=True, scoreGap=0.5))
    assert not verdict.settled
    assert verdict.reason == ("the first hit is dense rank 2, BM25 rank 1; "
                              "score gap between hits 1 and 2 is 0.4000 < 0.5")


DOCS = [
    Document("cats", "Cats are small domesticated carnivorous mammals that purr and hunt mice.", title="Cats"),
    Document("rust", "Rust prevents data races at compile time through ownership and borrowing.", title="Rust"),
    Document("tea", "Green tea is brewed from unoxidised leaves of Camellia sinensis.", title="Tea"),
]


async def test_a_real_hybrid_search_carries_the_ranks_signals_agree_reads(lite_store, embedder):
    ref = make_ref("confidence")
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    retriever = CollectionRetriever(lite_store, embedder, ref)
    question = Query("rust ownership prevents data races")
    agreed = await retriever.retrieve(question, SearchOptions(mode=Mode.HYBRID, limit=3))
    assert agreed[0].source_id == "rust"
    agree = Confidence(True, "dense and BM25 both rank the first hit first")
    assert confidence(agreed, rule(signalsAgree=True)) == agree
    # A dense search carries no BM25 rank, so its order never counts as agreed.
    dense = await retriever.retrieve(question, SearchOptions(mode=Mode.DENSE, limit=3))
    assert confidence(dense, rule(signalsAgree=True)) == Confidence(False, "the first hit is dense rank 1, BM25 rank -")
