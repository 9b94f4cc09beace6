"""The admin API over HTTP on a real gateway with its own milvus-lite store (no demo seeding)."""

import logging

import pytest

from gateway.settings import Settings
from tests.conftest import ROOT

UPSERT = """mutation($ns: String!, $c: String!, $docs: [DocumentInput!]!) {
  upsertDocuments(namespace: $ns, collection: $c, documents: $docs) { chunksWritten } }"""
STATS = """query { collectionStats(namespace: "support", collection: "docs") {
  namespace collection chunks parents sources lastIngestAt storageBytes storageNote denseIndex { type build search } } }"""
SOURCES = """query($first: Int!, $after: String) { sources(namespace: "support", collection: "docs", first: $first,
  after: $after) { total nextCursor sources { sourceId title chunks updatedAt } } }"""
COMPACT = """mutation { compactCollection(namespace: "support", collection: "docs") { collection rows skipped } }"""
CLEAR = """mutation { clearCollection(namespace: "support", collection: "docs") {
  collection sourcesDeleted chunksDeleted } }"""
DOCS = [{"sourceId": f"guide-{i}", "title": f"Guide {i}", "text": f"Guide number {i} explains refunds step {i}."}
        for i in range(3)]


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    from tests.serving import serve

    directory = tmp_path_factory.mktemp("admin")
    with serve(Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=ROOT / "tenants",
                        ingest_demo_on_start=False)) as served:
        served.data(UPSERT, {"ns": "support", "c": "docs", "docs": DOCS}, key="acme-writer")
        # Another tenant's rows in its own collection of the same names: never in acme's numbers.
        served.data(UPSERT, {"ns": "support", "c": "docs", "docs": DOCS[:1]}, key="globex-writer")
        yield served


@pytest.mark.parametrize("operation", [STATS, COMPACT, CLEAR, SOURCES])
@pytest.mark.parametrize("key", ["acme-reader", "acme-writer"])
def test_only_the_admin_role_may_use_the_admin_api(gw, operation, key):
    error = gw.error(operation, {"first": 10}, key=key)
    role = key.split("-")[1]
    assert error["extensions"]["code"] == "FORBIDDEN"
    assert f"role '{role}' of tenant 'acme' may not" in error["message"] and "allowed roles: admin" in error["message"]


def test_collection_stats_count_only_the_callers_rows(gw):
    stats = gw.data(STATS, key="acme-admin")["collectionStats"]
    assert (stats["chunks"], stats["parents"], stats["sources"]) == (3, 3, 3)
    assert stats["lastIngestAt"] is not None
    assert stats["storageBytes"] > 0 and "milvus-lite" in stats["storageNote"]
    assert stats["denseIndex"] == {"type": "FLAT", "build": {}, "search": {}}


def test_an_unknown_collection_lists_the_tenants_collections(gw):
    error = gw.error('query { collectionStats(namespace: "support", collection: "dox") { chunks } }',
                     key="acme-admin")
    assert error["extensions"]["code"] == "UNKNOWN_COLLECTION" and "known: docs, tickets" in error["message"]


def test_sources_are_paged_in_source_id_order(gw):
    first = gw.data(SOURCES, {"first": 2}, key="acme-admin")["sources"]
    assert first["total"] == 3 and first["nextCursor"] == "guide-1"
    assert [(s["sourceId"], s["title"], s["chunks"]) for s in first["sources"]] == [
        ("guide-0", "Guide 0", 1), ("guide-1", "Guide 1", 1)]
    rest = gw.data(SOURCES, {"first": 2, "after": first["nextCursor"]}, key="acme-admin")["sources"]
    assert [s["sourceId"] for s in rest["sources"]] == ["guide-2"] and rest["nextCursor"] is None
    error = gw.error(SOURCES, {"first": 5000}, key="acme-admin")
    assert error["extensions"]["code"] == "LIMIT_EXCEEDED" and "allowed: 1 to 1000" in error["message"]


def test_compact_then_clear_and_both_are_audited(gw, caplog):
    caplog.set_level(logging.INFO, logger="gateway.audit")
    compacted = gw.data(COMPACT, key="acme-admin")["compactCollection"]
    assert compacted == {"collection": "support/docs", "rows": 3, "skipped": None}
    cleared = gw.data(CLEAR, key="acme-admin")["clearCollection"]
    assert cleared == {"collection": "support/docs", "sourcesDeleted": 3, "chunksDeleted": 3}
    stats = gw.data(STATS, key="acme-admin")["collectionStats"]
    assert (stats["chunks"], stats["sources"], stats["lastIngestAt"]) == (0, 0, None)
    hits = gw.data('{ search(input: {query: "refunds", collection: "docs", namespace: "support"}) { hits { chunk { sourceId } } } }')
    assert hits["search"]["hits"] == []
    # globex's collection of the same name is untouched.
    globex = gw.data('{ search(input: {query: "refunds", collection: "docs"}) { hits { chunk { sourceId } } } }', key="globex-reader")
    assert [h["chunk"]["sourceId"] for h in globex["search"]["hits"]] == ["guide-0"]
    audit = [r.getMessage() for r in caplog.records if r.name == "gateway.audit"]
    assert any('"action": "compact"' in line and '"tenant": "acme"' in line and '"rows": 3' in line for line in audit)
    assert any('"action": "clear"' in line and '"role": "admin"' in line and '"chunks": 3' in line for line in audit)
    # The store stays ready: the collection is empty, not missing.
    import httpx
    assert httpx.get(f"{gw.url}/readyz").status_code == 200
