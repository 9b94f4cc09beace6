"""The adapter against a real milvus-lite directory and a real `milvus-lite server`, same assertions."""

import numpy as np
import pytest

from gateway.errors import StorageUnavailable
from gateway.storage.filters import Condition, Op, compile_filter
from gateway.storage.milvus import ChunkRecord, MilvusStore, ParentRecord, ScoredChunk
from gateway.storage.schema import Scope

TEXTS = {
    "refunds": "Refunds are issued to the original payment method within five business days.",
    "outage": "During an outage the status page lists affected regions and recovery estimates.",
    "invoices": "Invoices are emailed monthly and can be downloaded as PDF from the billing page.",
}


@pytest.fixture(params=["embedded", pytest.param("server", marks=pytest.mark.server)])
def store(request, lite_store, embedder):
    if request.param == "embedded":
        return lite_store
    return request.getfixturevalue("server_store")


def _records(embedder, texts, **extra):
    vectors = embedder.embed_documents(list(texts.values()))
    return [ChunkRecord(source_id=sid, chunk_id="0", parent_key=f"{sid}#p0", text=text, title=sid.title(),
                        content_hash=f"h-{sid}", created_at=1_700_000_000_000, updated_at=1_700_000_000_000,
                        dense=vec, metadata={"kind": sid, **extra}, index_text=text)
            for (sid, text), vec in zip(texts.items(), vectors)]


@pytest.fixture
def scopes(store, embedder, request):
    name = request.node.name.replace("[", "_").replace("]", "").lower()[:40]
    mine, theirs = Scope("acme", "docs", name), Scope("globex", "docs", name)
    for scope in (mine, theirs):
        store.drop(scope)
        store.ensure(scope)
    store.upsert_chunks(mine, _records(embedder, TEXTS))
    store.upsert_chunks(theirs, _records(embedder, {"secret": "Refunds for globex are secret and never issued."}))
    yield mine, theirs
    for scope in (mine, theirs):
        store.drop(scope)


def test_dense_scores_are_higher_is_better(store, scopes, embedder):
    mine, _ = scopes
    hits = store.search_dense(mine, embedder.embed_query("how do I get my money back"), 3)
    assert hits[0].chunk.source_id == "refunds"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(-1.0 <= h.score <= 1.0 for h in hits)


def test_bm25_scores_are_positive_and_higher_is_better(store, scopes):
    mine, _ = scopes
    hits = store.search_sparse(mine, "refunded payments", 3)
    assert [h.chunk.source_id for h in hits] == ["refunds"]  # stemming: refunded -> refund
    assert hits[0].score > 0


def test_searches_fetch_only_the_fields_asked_for(store, scopes, embedder):
    mine, _ = scopes
    vector = embedder.embed_query("how do I get my money back")
    full = store.search_dense(mine, vector, 3)
    bare = store.search_dense(mine, vector, 3, fields=frozenset())
    assert [(h.chunk.source_id, h.score) for h in bare] == [(h.chunk.source_id, h.score) for h in full]
    assert bare[0].chunk.text == "" and bare[0].chunk.title == "" and full[0].chunk.text
    some = store.search_sparse(mine, "refunded payments", 3, fields=frozenset({"text", "metadata"}))
    assert some[0].chunk.text == full[0].chunk.text and some[0].chunk.metadata == {"kind": "refunds"}
    assert some[0].chunk.title == "" and some[0].chunk.content_hash == ""
    with pytest.raises(ValueError, match="unknown chunk fields"):
        store.search_dense(mine, vector, 3, fields=frozenset({"dense"}))


class _Searches:
    """The store's client, recording what each search asked Milvus to return."""

    def __init__(self, client):
        self._client, self.output_fields = client, []

    def search(self, *args, **kwargs):
        self.output_fields.append(kwargs["output_fields"])
        return self._client.search(*args, **kwargs)

    def search_keys(self, *args, **kwargs):  # milvus-lite's lean call for keys (storage/milvus/client.py)
        self.output_fields.append(kwargs["output_fields"])
        return self._client.search_keys(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


def test_an_identities_only_search_fetches_primary_keys_and_reads_each_identity_from_its_key(
        store, scopes, embedder, monkeypatch):
    mine, theirs = scopes
    # Source ids may hold '/', spaces and query strings; chunk ids never hold a '/'.
    odd = {"guides/how-to/refund policy.md": "Refunds of annual plans are prorated by the day.",
           "https://example.com/refunds?lang=en&v=2": "Refund requests go through the billing portal."}
    store.upsert_chunks(mine, [*_records(embedder, odd), *[
        ChunkRecord(source_id=r.source_id, chunk_id="12", parent_key="", text=r.text + " Again.", title="",
                    content_hash="h2", created_at=0, updated_at=0, dense=r.dense, metadata={}, index_text=r.text)
        for r in _records(embedder, odd)]])
    recorder = _Searches(store._client)
    monkeypatch.setattr(store, "_client", recorder)
    vector = embedder.embed_query("refund policy")
    for search in (lambda fields: store.search_dense(mine, vector, 10, fields=fields),
                   lambda fields: store.search_sparse(mine, "refund policy", 10, fields=fields)):
        full, bare = search(None), search(frozenset())
        assert len(full) >= 5  # the sparse search finds the five that say "refund"
        assert [(h.row_id, h.identity, h.namespace, h.score) for h in bare] == \
            [(h.row_id, h.identity, h.namespace, h.score) for h in full]
        assert [(h.chunk.namespace, h.chunk.source_id, h.chunk.chunk_id) for h in bare] == \
            [(h.chunk.namespace, h.chunk.source_id, h.chunk.chunk_id) for h in full]
        assert {h.identity[1] for h in bare} >= set(odd) and {h.identity[2] for h in bare} == {"0", "12"}
        assert recorder.output_fields[-1] == ["id"]  # the primary key only, modality column or not
        assert [h.chunk for h in store.fill(mine, bare)] == [h.chunk for h in full]
    assert store.search_sparse(theirs, "refund policy", 10, fields=frozenset())[0].identity == ("docs", "secret", "0")


def test_fill_fetches_the_stored_fields_of_searched_rows_by_key(store, scopes, embedder):
    mine, _ = scopes
    vector = embedder.embed_query("how do I get my money back")
    full = store.search_dense(mine, vector, 3)
    bare = store.search_dense(mine, vector, 3, fields=frozenset())
    filled = store.fill(mine, bare)
    assert [(h.chunk, h.score) for h in filled] == [(h.chunk, h.score) for h in full]
    some = store.fill(mine, bare[:1], frozenset({"text"}))
    assert some[0].chunk.text == full[0].chunk.text and some[0].chunk.title == ""
    assert store.fill(mine, []) == []
    # A row deleted between the search and the fill is left out; the others keep their order.
    store.delete_chunks(mine, [bare[0].row_id])
    assert [h.chunk.source_id for h in store.fill(mine, bare)] == [h.chunk.source_id for h in full[1:]]


def test_fill_never_returns_a_row_outside_the_scope(store, scopes, embedder):
    mine, theirs = scopes
    # Rows planted in this tenant's physical collection under another tenant or namespace, with
    # keys the fill is asked for: the lookup names keys only, so the boundary is checked on each row.
    intruder = _records(embedder, {"planted": "Refunds planted by an intruder."})[0]
    for key, tenant, namespace in (("docs/planted/0", "globex", "docs"), ("docs/planted/1", "acme", "other")):
        store._client.upsert(mine.chunk_collection, [{
            "id": key, "tenant": tenant, "namespace": namespace, "source_id": "planted",
            "chunk_id": key[-1], "parent_key": "", "text": intruder.text, "bm25_text": "refund plant intrud",
            "dense": intruder.dense.tolist(), "title": "", "source_url": "", "source_path": "",
            "content_hash": "x", "created_at": 0, "updated_at": 0, "metadata": {}}])
    store._client.flush(mine.chunk_collection)
    rows = [ScoredChunk({"id": key, "tenant": "acme", "namespace": "docs", "source_id": "planted", "chunk_id": key[-1]},
                        1.0) for key in ("docs/planted/0", "docs/planted/1")]
    assert store.fill(mine, rows) == []
    # Another tenant's scope is never filled with this one's rows.
    bare = store.search_sparse(mine, "refunds", 3, fields=frozenset())
    assert bare and store.fill(theirs, bare) == []


def test_stop_words_only_query_finds_nothing(store, scopes):
    mine, _ = scopes
    assert store.search_sparse(mine, "the and of", 3) == []


def test_tenants_with_same_names_are_isolated(store, scopes, embedder):
    mine, theirs = scopes
    assert mine.chunk_collection != theirs.chunk_collection
    found = {h.chunk.source_id for h in store.search_sparse(mine, "refunds secret globex", 10)}
    assert "secret" not in found
    assert store.count(mine) == 3 and store.count(theirs) == 1


@pytest.mark.parametrize("hostile", ['" or tenant == "globex', "x\\\" or 1 == 1 or \\\"", "' or '1' == '1"])
def test_hostile_filter_values_cannot_cross_the_boundary(store, scopes, embedder, hostile):
    mine, _ = scopes
    # A row of another tenant planted in this tenant's physical collection: the boundary
    # expression must still exclude it, whatever the filter value says.
    intruder = _records(embedder, {"planted": "Refunds planted by an intruder."})[0]
    store._client.upsert(mine.chunk_collection, [{
        "id": "docs/planted/0", "tenant": "globex", "namespace": "docs", "source_id": "planted",
        "chunk_id": "0", "parent_key": "", "text": intruder.text, "bm25_text": "refund plant intrud",
        "dense": intruder.dense.tolist(), "title": "", "source_url": "", "source_path": "",
        "content_hash": "x", "created_at": 0, "updated_at": 0, "metadata": {}}])
    store._client.flush(mine.chunk_collection)
    where = compile_filter(Condition("source_id", Op.NE, hostile))
    sparse = store.search_sparse(mine, "refunds planted intruder", 10, where)
    dense = store.search_dense(mine, embedder.embed_query("refunds planted"), 10, where)
    assert {h.chunk.source_id for h in sparse + dense} <= set(TEXTS)
    assert "refunds" in {h.chunk.source_id for h in sparse}


def test_metadata_filters_apply(store, scopes):
    mine, _ = scopes
    where = compile_filter(Condition("metadata.kind", Op.IN, ("outage", "invoices")), {"kind"})
    hits = store.search_sparse(mine, "refunds outage invoices", 10, where)
    assert {h.chunk.source_id for h in hits} == {"outage", "invoices"}


SHAPES = {
    "pct": ("100% cotton", {"tags": ["a", "b"], "note": None}, 1_772_323_200_000),
    "pct2": ("100 percent wool", {"tags": ["b", "c"], "x": 1}, 1_772_323_199_999),
    "under": ("pure_cotton shirt", {"tags": "a"}, 1_700_000_000_000),
    "plain": ("pureXcotton back\\slash", {}, 1_800_000_000_000),
}


OPERATOR_CASES = [
    (Condition("title", Op.PREFIX, "100%"), {"pct"}),
    (Condition("title", Op.PREFIX, "100"), {"pct", "pct2"}),
    (Condition("title", Op.CONTAINS, "_cotton"), {"under"}),
    (Condition("title", Op.CONTAINS, "cotton"), {"pct", "under", "plain"}),
    (Condition("title", Op.CONTAINS, "\\"), {"plain"}),
    (Condition("metadata.tags", Op.CONTAINS_ANY, ("a", "c")), {"pct", "pct2"}),
    (Condition("metadata.tags", Op.CONTAINS_ALL, ("a", "b")), {"pct"}),
    (Condition("metadata.x", Op.EXISTS, True), {"pct2"}),
    (Condition("metadata.x", Op.IS_NULL, True), {"pct", "under", "plain"}),
    (Condition("metadata.note", Op.EXISTS, True), set()),  # a JSON null does not exist
    (Condition("metadata.note", Op.IS_NULL, False), set()),
    (Condition("created_at", Op.GTE, "2026-03-01T00:00:00Z"), {"pct", "plain"}),
    (Condition("created_at", Op.LT, "2026-03-01"), {"pct2", "under"}),
]


def test_text_presence_array_and_date_operators_match_on_the_engine(store, embedder):
    scope = Scope("acme", "docs", "operators")
    store.drop(scope)
    store.ensure(scope)
    vectors = embedder.embed_documents([title for title, _, _ in SHAPES.values()])
    store.upsert_chunks(scope, [
        ChunkRecord(source_id=sid, chunk_id="0", parent_key=f"{sid}#p0", text=title, title=title, content_hash=sid,
                    created_at=created, updated_at=created, dense=vec, metadata=metadata, index_text=title)
        for (sid, (title, metadata, created)), vec in zip(SHAPES.items(), vectors)])
    query = embedder.embed_query("cotton")
    found = {str(condition): {h.chunk.source_id for h in store.search_dense(
        scope, query, 10, compile_filter(condition, {"tags", "x", "note"}))} for condition, _ in OPERATOR_CASES}
    assert found == {str(condition): expected for condition, expected in OPERATOR_CASES}
    store.drop(scope)


def test_parents_sources_and_deletes(store, scopes):
    mine, theirs = scopes
    store.upsert_parents(mine, [ParentRecord("refunds#p0", "refunds", "Refunds", "Parent text", "ph")])
    store.upsert_parents(theirs, [ParentRecord("refunds#p0", "refunds", "Other", "Not yours", "ph")])
    assert store.parents(mine, ["refunds#p0", "missing"])["refunds#p0"].text == "Parent text"
    assert [c.chunk_id for c in store.source_chunks(mine, "refunds")] == ["0"]
    assert store.delete_source(mine, "refunds").chunks == 1
    assert store.source_chunks(mine, "refunds") == []
    assert store.parents(mine, ["refunds#p0"]) == {}
    assert store.parents(theirs, ["refunds#p0"])["refunds#p0"].text == "Not yours"


def test_inventory_lists_hashes_without_text(store, scopes):
    mine, _ = scopes
    inventory = store.inventory(mine)
    assert {row.content_hash for row in inventory.values()} == {"h-refunds", "h-outage", "h-invoices"}


def test_collections_are_loaded_again_after_reopen(tmp_path, embedder):
    path = str(tmp_path / "reopen.db")
    scope = Scope("acme", "docs", "reopen")
    first = MilvusStore(path)
    first.ensure(scope)
    first.upsert_chunks(scope, _records(embedder, TEXTS))
    first.close()
    second = MilvusStore(path)
    try:
        assert second.open_existing(scope)
        assert second.search_sparse(scope, "invoice", 1)[0].chunk.source_id == "invoices"
    finally:
        second.close()


def test_engine_capabilities_are_detected(store):
    assert store.capabilities.engine == "milvus-lite"  # the server here is milvus-lite's too
    assert store.capabilities.dense_index == "FLAT"


def test_second_process_gets_a_clear_lock_error(tmp_path):
    import subprocess
    import sys

    path = str(tmp_path / "locked.db")
    holder = MilvusStore(path)
    try:
        code = ("from gateway.storage.milvus import MilvusStore\n"
                f"MilvusStore({path!r})\n")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode != 0
        assert "StorageUnavailable" in result.stderr and "holds its lock" in result.stderr
    finally:
        holder.close()


def test_unreachable_server_is_storage_unavailable():
    with pytest.raises(StorageUnavailable, match="cannot connect to Milvus at 'http://127.0.0.1:9'"):
        MilvusStore("http://127.0.0.1:9", dim=4)


HOSTILE_IDS = ['zz"', '~" or id != "', 'a\\b', "x' or '1'=='1", 'q"] or id in ["', "ünï/cödé", "end\\"]


def test_inventory_pages_by_escaped_key_over_hostile_ids(store, embedder, monkeypatch):
    """pymilvus's query_iterator pasted the last key unescaped: `zz"` broke every later ingest and
    `~" or id != "` never ended. Paging now escapes the key; three rows a page forces many pages."""
    import gateway.storage.milvus.boundary as boundary

    monkeypatch.setattr(boundary, "_PAGE", 3)
    scope = Scope("acme", "docs", "hostile_paging")
    store.drop(scope)
    store.ensure(scope)
    vector = embedder.embed_documents(["x"])[0]
    ids = HOSTILE_IDS + [f"plain-{i}" for i in range(7)]
    store.upsert_chunks(scope, [ChunkRecord(source_id=sid, chunk_id="0", parent_key=f"{sid}#p0", text="t",
                                            title="", content_hash=f"h{n}", created_at=1, updated_at=1,
                                            dense=vector) for n, sid in enumerate(ids)])
    inventory = store.inventory(scope)
    assert sorted(row.source_id for row in inventory.values()) == sorted(ids)
    assert len(inventory) == len(ids)


def test_delete_source_reports_chunks_and_parents(store, scopes, embedder):
    mine, _ = scopes
    store.upsert_parents(mine, [ParentRecord("refunds#p0", "refunds", "Refunds", "parent text", "hp")])
    removed = store.delete_source(mine, "refunds")
    assert (removed.chunks, removed.parents) == (1, 1)
    again = store.delete_source(mine, "refunds")
    assert (again.chunks, again.parents) == (0, 0)


def test_searching_a_scope_never_ingested_creates_nothing(store, embedder):
    scope = Scope("acme", "docs", "never_ingested")
    store.drop(scope)
    assert store.search_dense(scope, embedder.embed_query("refunds"), 3) == []
    assert store.search_sparse(scope, "refunds", 3) == []
    assert not store.exists(scope) and not store.open_existing(scope)


def test_a_title_over_its_length_is_refused_by_the_engine_without_pymilvus_checking_it(store, scopes, embedder):
    # pymilvus's own per-row string check is off (it walked every character and could fail nothing):
    # the length limit is the engine's, and a row over it is still refused, not truncated.
    from pymilvus.client import entity_helper

    assert entity_helper.CHECK_STR_ARRAY is False
    mine, _ = scopes
    [record] = _records(embedder, {"long": "A normal text."})
    from dataclasses import replace
    with pytest.raises(Exception, match="(?i)length|max"):
        store.upsert_chunks(mine, [replace(record, title="t" * 5000)])
    assert store.source_chunks(mine, "long") == []


def test_a_sources_chunks_can_be_read_bounded(store, scopes, embedder):
    mine, theirs = scopes
    texts = [f"Part {i} of the long manual about refunds." for i in range(12)]
    vectors = embedder.embed_documents(texts)
    store.upsert_chunks(mine, [ChunkRecord(source_id="manual", chunk_id=str(i), parent_key="manual#p0", text=text,
                                           title="Manual", content_hash=f"m-{i}", created_at=1, updated_at=1,
                                           dense=vector, metadata={}, index_text=text)
                               for i, (text, vector) in enumerate(zip(texts, vectors))])
    assert [c.chunk_id for c in store.source_chunks(mine, "manual")] == [str(i) for i in range(12)]
    bounded = store.source_chunks(mine, "manual", limit=5)
    assert len(bounded) == 5 and {c.source_id for c in bounded} == {"manual"}
    assert store.source_chunks(theirs, "manual", limit=5) == []  # the boundary holds with a limit too
    # Named chunks only (a conversation's previous hits), in chunk order; the boundary holds too.
    assert [c.chunk_id for c in store.source_chunks(mine, "manual", chunk_ids=["10", "2", "missing"])] == ["2", "10"]
    assert store.source_chunks(theirs, "manual", chunk_ids=["2"]) == []
