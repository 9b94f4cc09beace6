"""Ingest -> search on a real milvus-lite directory with the real bundled model."""

import pytest

from gateway.errors import InvalidInput
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from tests.conftest import make_ref

DOCS = [
    Document("refunds", "Refunds go back to the original card within five business days. "
             "Store credit is instant.", title="Refund policy"),
    Document("outages", "When the service is down, check the status page. Incidents are posted within "
             "ten minutes.", title="Outages"),
    Document("invoices", "Invoices are emailed monthly. Download them as PDF from billing.", title="Invoices"),
]


@pytest.fixture
def ref(request, lite_store):
    ref = make_ref(collection=request.node.name[:40].lower().replace("[", "").replace("]", ""))
    lite_store.drop(ref.scope)
    return ref


def search(store, embedder, ref, text, mode=Mode.HYBRID):
    options = SearchOptions(mode=mode, limit=5, candidates=20)
    import asyncio
    return asyncio.run(CollectionRetriever(store, embedder, ref).retrieve(Query(text), options))


def test_ingest_then_search_finds_the_right_source(lite_store, embedder, ref):
    report = ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    assert (report.sources, report.chunks_written, report.parents_written) == (3, 3, 3)
    for mode in Mode:
        hits = search(lite_store, embedder, ref, "how long until my money is returned?", mode)
        if mode is Mode.SPARSE:
            hits = search(lite_store, embedder, ref, "refund card", mode)
        assert hits[0].source_id == "refunds", mode
        assert hits[0].title == "Refund policy"
        assert hits[0].provenance.content_hash


def test_reingest_unchanged_embeds_and_writes_nothing(lite_store, embedder, ref):
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    again = ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    assert (again.chunks_written, again.chunks_unchanged, again.parents_written) == (0, 3, 0)
    assert again.embed_seconds == 0.0


def test_changed_source_replaces_its_chunks_and_keeps_created_at(lite_store, embedder, ref):
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False, now_ms=1_000)
    changed = [DOCS[0], DOCS[1], Document("invoices", "Invoices now arrive weekly by post.", title="Invoices")]
    report = ingest_documents(lite_store, embedder, ref, changed, progress=False, now_ms=2_000)
    assert (report.chunks_written, report.chunks_unchanged) == (1, 2)
    [chunk] = lite_store.source_chunks(ref.scope, "invoices")
    assert chunk.text == "Invoices now arrive weekly by post."
    assert (chunk.created_at, chunk.updated_at) == (1_000, 2_000)


def test_shrinking_source_deletes_stale_chunks(lite_store, embedder, ref):
    long_doc = Document("long", " ".join(f"Paragraph sentence {i} about shipping." for i in range(120)))
    ingest_documents(lite_store, embedder, ref, [long_doc], progress=False)
    before = len(lite_store.source_chunks(ref.scope, "long"))
    assert before > 2
    report = ingest_documents(lite_store, embedder, ref, [Document("long", "Now short.")], progress=False)
    assert report.chunks_deleted == before - 1
    assert [c.text for c in lite_store.source_chunks(ref.scope, "long")] == ["Now short."]
    assert set(lite_store.parent_inventory(ref.scope)) == {"long#p0"}


def test_prune_removes_sources_missing_from_the_run(lite_store, embedder, ref):
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    without_prune = ingest_documents(lite_store, embedder, ref, DOCS[:1], progress=False)
    assert without_prune.sources_pruned == 0 and lite_store.count(ref.scope) == 3
    pruned = ingest_documents(lite_store, embedder, ref, DOCS[:1], prune=True, progress=False)
    assert pruned.sources_pruned == 2
    assert {row.source_id for row in lite_store.inventory(ref.scope).values()} == {"refunds"}


def test_duplicate_source_in_one_run_is_rejected(lite_store, embedder, ref):
    with pytest.raises(InvalidInput, match="source id 'refunds' appears twice"):
        ingest_documents(lite_store, embedder, ref, [DOCS[0], DOCS[0]], progress=False)


def test_token_vectors_written_backfilled_and_pruned(ref, lite_store, embedder, tmp_path):
    from gateway.storage.token_vectors import TokenTarget, TokenVectorStore

    tokens = TokenTarget(TokenVectorStore(tmp_path / "tokens"), 512)
    first = ingest_documents(lite_store, embedder, ref, DOCS, progress=False, tokens=tokens)
    assert first.token_vectors_written == 3 and tokens.store.count(ref.scope) == 3
    again = ingest_documents(lite_store, embedder, ref, DOCS, progress=False, tokens=tokens)
    assert again.token_vectors_written == 0 and again.chunks_written == 0
    tokens.store.delete_source(ref.scope, "invoices")  # e.g. a pipeline added after the first ingest
    backfill = ingest_documents(lite_store, embedder, ref, DOCS, progress=False, tokens=tokens)
    assert backfill.token_vectors_written == 1 and backfill.chunks_written == 0
    ingest_documents(lite_store, embedder, ref, DOCS[:1], prune=True, progress=False, tokens=tokens)
    assert tokens.store.count(ref.scope) == 1
