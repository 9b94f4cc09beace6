import asyncio

import pytest

from gateway.errors import InvalidFilter, ModeNotSupported
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.options import Fusion, Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.storage.filters import Condition, Op
from tests.conftest import make_ref

DOCS = [
    Document("gpu", "Training on a GPU requires CUDA drivers and enough device memory.", title="GPUs",
             metadata={"year": 2021, "lang": "en"}),
    Document("cpu", "Inference on a CPU benefits from int8 quantisation and batching.", title="CPUs",
             metadata={"year": 2023, "lang": "en"}),
    Document("tpu", "Le TPU exécute des multiplications de matrices très rapidement.", title="TPUs",
             metadata={"year": 2023, "lang": "fr"}),
]


@pytest.fixture(scope="module")
def ref(lite_store, embedder):
    ref = make_ref(collection="retrievers", metadata_fields=("year", "lang"))
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    return ref


def run(retriever, text, **options):
    options = SearchOptions(**{"mode": Mode.HYBRID, "limit": 5, "candidates": 10, **options})
    return asyncio.run(retriever.retrieve(Query(text), options))


def test_hybrid_hits_carry_both_signals_and_provenance(lite_store, embedder, ref):
    hits = run(CollectionRetriever(lite_store, embedder, ref, route="explicit"), "quantised CPU inference")
    top = hits[0]
    assert top.source_id == "cpu"
    assert {s.signal for s in top.provenance.scores} == {"dense", "sparse"}
    assert top.provenance.fused_score == top.score
    assert (top.provenance.tenant, top.provenance.trust_tier, top.provenance.route) == ("acme", "first-party", "explicit")
    assert top.provenance.ingested_at is not None


@pytest.mark.parametrize("fusion", list(Fusion))
def test_every_fusion_ranks_scores_descending(lite_store, embedder, ref, fusion):
    hits = run(CollectionRetriever(lite_store, embedder, ref), "GPU memory", fusion=fusion, alpha=0.5)
    assert hits[0].source_id == "gpu"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_metadata_filter_and_threshold(lite_store, embedder, ref):
    retriever = CollectionRetriever(lite_store, embedder, ref)
    hits = run(retriever, "matrix multiplication hardware",
               filter=Condition("metadata.lang", Op.EQ, "en"), mode=Mode.DENSE)
    assert {h.source_id for h in hits} == {"gpu", "cpu"}
    high = run(retriever, "GPU memory", mode=Mode.DENSE, threshold=0.99)
    assert high == []


def test_undeclared_metadata_key_is_an_invalid_filter(lite_store, embedder, ref):
    with pytest.raises(InvalidFilter, match="'metadata.author' is not filterable here; allowed: .*metadata.lang"):
        run(CollectionRetriever(lite_store, embedder, ref), "x", filter=Condition("metadata.author", Op.EQ, "me"))


@pytest.mark.parametrize("mode", [Mode.DENSE, Mode.HYBRID])
def test_modes_needing_an_embedder_fail_loudly_without_one(lite_store, ref, mode):
    with pytest.raises(ModeNotSupported, match=f"mode '{mode.value}' needs an embedder.*supported here: sparse"):
        run(CollectionRetriever(lite_store, None, ref), "GPU", mode=mode)
    assert run(CollectionRetriever(lite_store, None, ref), "GPU", mode=Mode.SPARSE)[0].source_id == "gpu"
