"""isolation: partition_key — tenants sharing one physical collection, `tenant` the partition key.

The gateway refuses this layout on milvus-lite (tests/storage/test_capabilities.py,
tests/test_runtime.py), but milvus-lite 3.2.2's engine does create partition-key collections, so the
adapter's shared-collection code runs here on the real engine, embedded and as `milvus-lite server`.
It was not run against Milvus standalone (none is available where these tests run).
"""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.storage.milvus import MilvusStore, ParentRecord
from gateway.storage.schema import Isolation, Layout, Scope, shared_name
from tests.storage.test_milvus import _records

SHARED = Layout.of([("acme", Isolation.PARTITION_KEY), ("globex", Isolation.PARTITION_KEY)])


@pytest.fixture(params=["embedded", pytest.param("server", marks=pytest.mark.server)])
def shared_store(request, tmp_path_factory):
    uri = (str(tmp_path_factory.mktemp("shared") / "gateway.db") if request.param == "embedded"
           else request.getfixturevalue("milvus_server"))
    store = MilvusStore(uri, layout=SHARED)
    yield store
    store.close()


@pytest.fixture
def tenants(shared_store, embedder, request):
    """Two tenants with the same namespace, collection, source ids and chunk ids."""
    name = request.node.name.replace("[", "_").replace("]", "").lower()[:40]
    acme, globex = Scope("acme", "docs", name), Scope("globex", "docs", name)
    for scope, text in ((acme, "Refunds reach the original card within five days."),
                        (globex, "Refunds for globex are secret and never issued.")):
        shared_store.drop(scope)
        shared_store.ensure(scope)
        shared_store.upsert_chunks(scope, _records(embedder, {"refunds": text}))
        shared_store.upsert_parents(scope, [ParentRecord(key="refunds#p0", source_id="refunds", title="Refunds",
                                                         text=f"parent of {scope.tenant}", content_hash="p")])
    yield acme, globex
    for scope in (acme, globex):
        shared_store.drop(scope)


def test_tenants_share_one_partition_keyed_collection(shared_store, tenants):
    acme, globex = tenants
    assert shared_store.physical(acme).chunks == shared_store.physical(globex).chunks == \
        shared_name("docs", acme.collection, "c")
    described = shared_store.guard.describe_collection(shared_store.physical(acme).chunks)
    keyed = [f["name"] for f in described["fields"] if f.get("is_partition_key")]
    assert keyed == ["tenant"]
    # Same logical ids in both tenants: the stored primary keys carry the tenant, so neither overwrote the other.
    assert shared_store.count(acme) == shared_store.count(globex) == 1
    assert list(shared_store.inventory(acme)) == list(shared_store.inventory(globex)) == ["docs/refunds/0"]


def test_every_read_stays_inside_the_tenant(shared_store, tenants, embedder):
    acme, globex = tenants
    sparse = shared_store.search_sparse(acme, "refunds secret globex", 10)
    dense = shared_store.search_dense(acme, embedder.embed_query("globex secret refunds"), 10)
    assert [h.chunk.text for h in sparse] == [h.chunk.text for h in dense] == \
        ["Refunds reach the original card within five days."]
    assert shared_store.source_chunks(globex, "refunds")[0].text.startswith("Refunds for globex")
    assert shared_store.parents(acme, ["refunds#p0"])["refunds#p0"].text == "parent of acme"
    assert shared_store.parents(globex, ["refunds#p0"])["refunds#p0"].key == "refunds#p0"
    assert list(shared_store.parent_inventory(globex)) == ["refunds#p0"]


def test_fill_in_a_shared_collection_returns_only_the_tenants_own_rows(shared_store, tenants):
    acme, globex = tenants
    # Both tenants hold docs/refunds/0; the search rows carry the tenant's own primary key.
    acme_rows = shared_store.search_sparse(acme, "refunds", 10, fields=frozenset())
    globex_rows = shared_store.search_sparse(globex, "refunds", 10, fields=frozenset())
    # Searched for identities only, each row's identity comes from its key, without the tenant.
    assert [(h.row_id, h.identity) for h in acme_rows] == [("acme/docs/refunds/0", ("docs", "refunds", "0"))]
    assert [(h.row_id, h.identity) for h in globex_rows] == [("globex/docs/refunds/0", ("docs", "refunds", "0"))]
    assert [h.chunk.text for h in shared_store.fill(acme, acme_rows)] == \
        ["Refunds reach the original card within five days."]
    assert [h.chunk.text for h in shared_store.fill(globex, globex_rows)] == \
        ["Refunds for globex are secret and never issued."]
    # Another tenant's rows asked of this tenant's scope: found by key, refused by the boundary check.
    assert shared_store.fill(globex, acme_rows) == [] and shared_store.fill(acme, globex_rows) == []


def test_deletes_and_drop_touch_only_the_tenant(shared_store, tenants):
    acme, globex = tenants
    assert shared_store.delete_chunks(acme, ["docs/refunds/0"]) == 1
    assert shared_store.count(acme) == 0 and shared_store.count(globex) == 1
    assert shared_store.delete_source(globex, "refunds").parents == 1
    assert shared_store.parents(acme, ["refunds#p0"]) != {}
    shared_store.drop(acme)
    assert shared_store.exists(globex)  # the shared collection stays: other tenants live in it
    assert shared_store.parent_inventory(acme) == {}


def test_rebuild_refuses_a_shared_collection(shared_store, tenants):
    acme, _ = tenants
    with pytest.raises(ConfigError, match=r"tenant 'acme' \(isolation: partition_key\) shares gw_cs_docs__"):
        shared_store.rebuild(acme)


def test_isolated_tenants_keep_their_own_collections(shared_store):
    mine = Scope("initech", "docs", "guides")
    where = shared_store.physical(mine)
    assert not where.shared and where.chunks == mine.chunk_collection
    assert where.row_key("docs/a/0") == "docs/a/0"


def test_the_boundary_is_the_same_expression_for_both_layouts():
    # The partition key is `tenant`, so Milvus prunes partitions from the boundary's own clause.
    expression = MilvusStore._boundary(Scope("acme", "docs", "guides"), 'source_id == "a"')
    assert expression == 'tenant == "acme" and namespace == "docs" and (source_id == "a")'


def test_verify_reads_the_tenants_rows_of_the_shared_collections(shared_store, tenants):
    from gateway.ingest.verify import Finding, verify_collection
    from tests.conftest import make_ref

    acme, _ = tenants
    check = verify_collection(shared_store, make_ref("acme", "docs", acme.collection), model="m", dim=384)
    assert (check.chunks, check.parents) == (1, 1)
    assert Finding.ORPHAN_PARENT not in check.problems
