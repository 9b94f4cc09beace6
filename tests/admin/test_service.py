"""The admin service against both engines: what each can tell about storage, and the role check."""

import pytest

from gateway.admin.service import SERVER_BYTES, Admin
from gateway.errors import Forbidden
from gateway.ingest.loaders import Document
from gateway.ingest.service import Writer
from gateway.ingest.sync import ingest_documents
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role
from gateway.tenancy.registry import TenantRegistry
from gateway.tenancy.loader import load_tenants
from tests.conftest import ROOT

ADMIN = Principal("acme", Role.ADMIN)


def _admin(store, embedder) -> tuple[Admin, TenantRegistry]:
    registry = TenantRegistry(load_tenants(ROOT / "tenants"))
    return Admin(registry, store, None, Writer(registry, store, embedder)), registry


async def test_a_collection_never_ingested_has_zero_counts_and_says_so(lite_store, embedder):
    admin, _ = _admin(lite_store, embedder)
    stats = await admin.stats(ADMIN, "support", "tickets")
    assert (stats.chunks, stats.sources, stats.last_ingest_ms, stats.storage_bytes) == (0, 0, None, None)
    assert stats.storage_note == "not ingested yet" and stats.dense_index is None
    with pytest.raises(Forbidden, match="role 'writer' of tenant 'acme' may not read collection statistics"):
        await admin.stats(Principal("acme", Role.WRITER), "support", "tickets")


@pytest.mark.server
async def test_a_milvus_server_gives_counts_but_no_size_and_says_where_to_look(server_store, embedder):
    admin, registry = _admin(server_store, embedder)
    ref = registry.resolve("acme", "docs", namespace="support")
    server_store.drop(ref.scope)
    ingest_documents(server_store, embedder, ref, [Document("a", "Alpha text."), Document("b", "Beta text.")],
                     progress=False, now_ms=1_700_000_000_000)
    stats = await admin.stats(ADMIN, "support", "docs")
    assert (stats.chunks, stats.sources, stats.last_ingest_ms) == (2, 2, 1_700_000_000_000)
    assert stats.storage_bytes is None and stats.storage_note == SERVER_BYTES
    cleared = await admin.clear(ADMIN, "support", "docs")
    assert (cleared.sources, cleared.chunks) == (2, 2) and server_store.count(ref.scope) == 0


async def test_statistics_name_the_dense_index_and_its_parameters(lite_store, embedder):
    admin, registry = _admin(lite_store, embedder)
    ref = registry.resolve("acme", "docs", namespace="support")
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, [Document("a", "Alpha text.")], progress=False)
    stats = await admin.stats(ADMIN, "support", "docs")
    # A small collection under index.dense: auto is searched exactly.
    assert (stats.dense_index.index_type, stats.dense_index.build, stats.dense_index.search) == ("FLAT", {}, {})
