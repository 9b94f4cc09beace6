"""The admin API's domain side: statistics, source listing, compaction and clearing of a collection.

Every call needs the `admin` role of the caller's own tenant (a reader or writer key is FORBIDDEN),
resolves the collection through the registry (another tenant's collection is simply unknown),
and every change is written to the `gateway.audit` log as one JSON line.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gateway.admin.compact import Compacted, compact
from gateway.admission.scheduler import offload
from gateway.errors import LimitExceeded
from gateway.ingest.service import Writer
from gateway.storage.edges import EdgeStore
from gateway.storage.indexes import IndexState
from gateway.storage.milvus import MilvusStore, is_embedded
from gateway.storage.record import StorePaths
from gateway.storage.token_vectors import TokenVectorStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role
from gateway.tenancy.registry import CollectionRef, TenantRegistry

audit_log = logging.getLogger("gateway.audit")
# A page of sources; the whole list of a large collection is paged, never one answer.
MAX_PAGE = 1000
SERVER_BYTES = ("a Milvus server reports no per-collection size through its client API; read it from the "
                "server's own metrics (milvus_datacoord_stored_binlog_size)")
SHARED_BYTES = ("this tenant's rows share physical collections with other tenants (isolation: partition_key), "
                "so their size on disk is not this tenant's")


@dataclass(frozen=True, slots=True)
class CollectionStats:
    namespace: str
    collection: str
    chunks: int
    parents: int
    sources: int
    last_ingest_ms: int | None     # newest chunk's updated_at; None when empty
    storage_bytes: int | None      # None when the engine cannot tell: `storage_note` says why
    storage_note: str
    dense_index: IndexState | None = None  # None before the first ingest


@dataclass(frozen=True, slots=True)
class SourceSummary:
    source_id: str
    title: str
    chunks: int
    updated_ms: int


@dataclass(frozen=True, slots=True)
class SourcePage:
    sources: tuple[SourceSummary, ...]
    total: int
    # Pass as `after` for the next page; None on the last page.
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Cleared:
    collection: str
    sources: int
    chunks: int


class Admin:
    """Admin operations on one tenant's collections (blocking store calls run via `offload`)."""

    def __init__(self, registry: TenantRegistry, store: MilvusStore, tokens: TokenVectorStore | None,
                 writer: Writer) -> None:
        self._registry = registry
        self._store = store
        self._tokens = tokens
        self._writer = writer

    def _ref(self, principal: Principal, namespace: str, collection: str, action: str) -> CollectionRef:
        principal.require(Role.ADMIN, action)
        return self._registry.resolve(principal.tenant, collection, namespace=namespace)

    async def stats(self, principal: Principal, namespace: str, collection: str) -> CollectionStats:
        ref = self._ref(principal, namespace, collection, "read collection statistics")
        return await offload(self._stats, ref)

    async def sources(self, principal: Principal, namespace: str, collection: str, first: int,
                      after: str | None) -> SourcePage:
        ref = self._ref(principal, namespace, collection, "list sources")
        if not 1 <= first <= MAX_PAGE:
            raise LimitExceeded(f"first {first} is outside the page size; allowed: 1 to {MAX_PAGE}")
        return await offload(self._sources, ref, first, after)

    async def compact(self, principal: Principal, namespace: str, collection: str) -> Compacted:
        ref = self._ref(principal, namespace, collection, "compact collections")
        async with self._writer.exclusive(ref):  # no upsert of this collection runs meanwhile
            result = await offload(compact, self._store, ref)
        _audit(principal, "compact", ref, rows=result.rows, skipped=result.skipped)
        return result

    async def clear(self, principal: Principal, namespace: str, collection: str) -> Cleared:
        ref = self._ref(principal, namespace, collection, "drop a collection's data")
        async with self._writer.exclusive(ref):
            result = await offload(self._clear, ref)
        _audit(principal, "clear", ref, sources=result.sources, chunks=result.chunks)
        return result

    # -- blocking ---------------------------------------------------------------------------

    def _stats(self, ref: CollectionRef) -> CollectionStats:
        scope = ref.scope
        if not self._store.open_existing(scope):
            return CollectionStats(scope.namespace, scope.collection, 0, 0, 0, None, None, "not ingested yet")
        sources: set[str] = set()
        chunks, newest = 0, 0
        for row in self._store.chunk_rows(scope, ["source_id", "updated_at"]):
            chunks += 1
            sources.add(row["source_id"])
            newest = max(newest, int(row["updated_at"]))
        parents = len(self._store.parent_inventory(scope))
        size, note = self._bytes(ref)
        return CollectionStats(scope.namespace, scope.collection, chunks, parents, len(sources),
                               newest or None, size, note, self._store.dense_index(scope))

    def _bytes(self, ref: CollectionRef) -> tuple[int | None, str]:
        where = self._store.physical(ref.scope)
        if where.shared:
            return None, SHARED_BYTES
        if not is_embedded(self._store.uri):
            return None, SERVER_BYTES
        # The same directory whether this process embeds milvus-lite or talks to `gateway serve`'s server.
        directory = StorePaths.of(self._store.uri).store
        total = sum(_size(directory / "collections" / name) for name in (where.chunks, where.parents))
        return total, "bytes on disk of the collection's milvus-lite files (chunks and parents), " \
                      "including rows deleted but not yet compacted"

    def _sources(self, ref: CollectionRef, first: int, after: str | None) -> SourcePage:
        scope = ref.scope
        if not self._store.open_existing(scope):
            return SourcePage((), 0, None)
        counts: Counter[str] = Counter()
        titles: dict[str, str] = {}
        updated: dict[str, int] = {}
        for row in self._store.chunk_rows(scope, ["source_id", "title", "updated_at"]):
            source = row["source_id"]
            counts[source] += 1
            titles.setdefault(source, row.get("title") or "")
            updated[source] = max(updated.get(source, 0), int(row["updated_at"]))
        ordered = sorted(counts)
        remaining = [s for s in ordered if after is None or s > after]
        page = remaining[:first]
        more = len(remaining) > first
        return SourcePage(tuple(SourceSummary(s, titles[s], counts[s], updated[s]) for s in page),
                          len(ordered), page[-1] if more and page else None)

    def _clear(self, ref: CollectionRef) -> Cleared:
        scope = ref.scope
        if not self._store.open_existing(scope):
            return Cleared(ref.label, 0, 0)
        inventory = self._store.inventory(scope)
        sources = {row.source_id for row in inventory.values()}
        self._store.clear(scope)
        if self._tokens is not None and inventory:
            self._tokens.delete_rows(scope, list(inventory))
        edges = EdgeStore(self._store)
        if edges.exists(scope) and sources:
            edges.delete_sources(scope, sorted(sources))
        return Cleared(ref.label, len(sources), len(inventory))


def _size(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _audit(principal: Principal, action: str, ref: CollectionRef, **details: object) -> None:
    """One JSON line per admin change: who (tenant, role), what, where, and the outcome's counts."""
    audit_log.info(json.dumps({"event": "admin", "action": action, "tenant": principal.tenant,
                               "role": principal.role.value, "namespace": ref.scope.namespace,
                               "collection": ref.scope.collection, **details}, sort_keys=True))
