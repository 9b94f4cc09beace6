"""The write path behind the API: per-call limits before any work, and deletes that can be repeated."""

import asyncio

import numpy as np
import pytest

from gateway.errors import InvalidInput, LimitExceeded, ModeNotSupported, UnknownSource
from gateway.ingest.loaders import Document
from gateway.ingest.vectors import VectorChunk
from gateway.ingest.service import UpsertLimits, Writer
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role
from gateway.tenancy.loader import load_tenants
from gateway.tenancy.registry import TenantRegistry
from tests.conftest import ROOT

WRITER = Principal("acme", Role.WRITER)


@pytest.fixture(scope="module")
def registry():
    return TenantRegistry(load_tenants(ROOT / "tenants"))


def writer(registry, store, embedder, **limits):
    return Writer(registry, store, embedder, limits=UpsertLimits(**limits))


def upsert(w, docs):
    return asyncio.run(w.upsert(WRITER, "support", "tickets", docs))


def test_each_limit_is_exact_and_named(registry, lite_store, embedder):
    w = writer(registry, lite_store, embedder, documents=2, chunks=3, metadata_bytes=20)
    with pytest.raises(LimitExceeded, match="3 documents in one upsertDocuments call; at most 2"):
        upsert(w, [Document(f"d{i}", "t") for i in range(3)])
    with pytest.raises(LimitExceeded, match=r"metadata of document 'm' is 21 bytes as JSON; at most 20"):
        upsert(w, [Document("m", "t", metadata={"k": "x" * 12})])
    # tickets cut children at 1,000 characters with 150 overlap: 5,000 characters make at least 5.
    long_text = ". ".join(f"Sentence number {i} about the refund queue" for i in range(120))
    with pytest.raises(LimitExceeded, match="make more than 3 chunks .* at most 3 per call"):
        upsert(w, [Document("long", long_text)])
    with pytest.raises(InvalidInput, match="documents is empty"):
        upsert(w, [])
    assert lite_store.exists(registry.resolve("acme", "tickets", namespace="support").scope) is False


def test_delete_after_an_interrupted_delete_removes_the_parents(registry, lite_store, embedder):
    w = writer(registry, lite_store, embedder)
    upsert(w, [Document("half", "A ticket about a refund that was half deleted.")])
    scope = registry.resolve("acme", "tickets", namespace="support").scope
    lite_store.delete_chunks(scope, list(lite_store.inventory(scope)))  # the crash came after the chunks
    assert asyncio.run(w.delete_source(WRITER, "support", "tickets", "half")) == []
    assert lite_store.parent_inventory(scope) == {}
    with pytest.raises(UnknownSource, match="source 'half' is not in support/tickets"):
        asyncio.run(w.delete_source(WRITER, "support", "tickets", "half"))


def test_a_custom_retriever_collection_takes_no_documents(lite_store, embedder):
    from gateway.tenancy.config import TenantConfig
    tenant = TenantConfig.model_validate({"id": "acme", "namespaces": {"help": {"collections": {
        "faq": {"trust_tier": "partner", "retriever": "tests.retrieval.faq_retriever:lookup"}}}}})
    w = writer(TenantRegistry({"acme": tenant}), lite_store, embedder)
    with pytest.raises(InvalidInput, match="'help/faq' is served by the custom retriever .* never reads documents"):
        asyncio.run(w.upsert(WRITER, "help", "faq", [Document("d", "text")]))


def _unit(seed: int, dim: int = 384) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def test_without_an_embedder_chunks_that_bring_vectors_are_written(registry, lite_store):
    w = Writer(registry, lite_store, None)
    docs = [Document("own", "", chunks=(VectorChunk("Rotate the valve.", _unit(1)), VectorChunk("Reset.", _unit(2))))]
    report = upsert(w, docs)
    assert (report.chunks_written, report.chunks_unchanged) == (2, 0)
    scope = registry.resolve("acme", "tickets", namespace="support").scope
    assert [c.text for c in lite_store.source_chunks(scope, "own")] == ["Rotate the valve.", "Reset."]
    assert upsert(w, docs).chunks_unchanged == 2  # idempotent by content hash, as with an embedder
    hits = lite_store.search_dense(scope, _unit(2), 1)
    assert (hits[0].source_id, hits[0].chunk_id) == ("own", "1")
    asyncio.run(w.delete_source(WRITER, "support", "tickets", "own"))


def test_without_an_embedder_a_document_without_vectors_is_refused_by_name(registry, lite_store):
    w = Writer(registry, lite_store, None)
    docs = [Document("own", "", chunks=(VectorChunk("Rotate.", _unit(1)),)), Document("plain", "Needs a model.")]
    with pytest.raises(ModeNotSupported, match="document 'plain' brings no vectors, and this gateway has no embedder"):
        upsert(w, docs)
