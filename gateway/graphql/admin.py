"""Admin API fields (role `admin`): collection statistics, source listing, compaction, clearing."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.types import Info

from gateway.admin import service
from gateway.admin.compact import Compacted
from gateway.graphql.context import Context
from gateway.retrieval.retrievers import epoch_ms_to_datetime


def _admin(info: Info[Context, None]) -> service.Admin:
    admin = info.context.admin
    assert admin is not None, "create_app builds the admin service"
    return admin


@strawberry.type(description="What one collection of the caller's tenant holds (admin).")
class CollectionStats:
    namespace: str
    collection: str
    chunks: int
    parents: int
    sources: int
    last_ingest_at: datetime | None = strawberry.field(description="The newest chunk's updatedAt; null when empty.")
    storage_bytes: int | None = strawberry.field(
        description="Bytes on disk (milvus-lite); null where the engine cannot tell, and storageNote says why.")
    storage_note: str

    @classmethod
    def from_domain(cls, s: service.CollectionStats) -> CollectionStats:
        return cls(namespace=s.namespace, collection=s.collection, chunks=s.chunks, parents=s.parents,
                   sources=s.sources, last_ingest_at=epoch_ms_to_datetime(s.last_ingest_ms) if s.last_ingest_ms
                   else None, storage_bytes=s.storage_bytes, storage_note=s.storage_note)


@strawberry.type(description="One source of a collection: its chunk count and last update.")
class SourceSummary:
    source_id: str
    title: str
    chunks: int
    updated_at: datetime | None


@strawberry.type(description="A page of a collection's sources in sourceId order; pass nextCursor as `after`.")
class SourcePage:
    sources: list[SourceSummary]
    total: int
    next_cursor: str | None

    @classmethod
    def from_domain(cls, p: service.SourcePage) -> SourcePage:
        return cls(sources=[SourceSummary(source_id=s.source_id, title=s.title, chunks=s.chunks,
                                          updated_at=epoch_ms_to_datetime(s.updated_ms) if s.updated_ms else None)
                            for s in p.sources], total=p.total, next_cursor=p.next_cursor)


@strawberry.type
class CompactResult:
    collection: str
    rows: int
    seconds: float
    skipped: str | None

    @classmethod
    def from_domain(cls, c: Compacted) -> CompactResult:
        return cls(collection=c.collection, rows=c.rows, seconds=c.seconds, skipped=c.skipped)


@strawberry.type
class ClearResult:
    collection: str
    sources_deleted: int
    chunks_deleted: int


@strawberry.type
class AdminQuery:
    @strawberry.field(description="Chunks, parents, sources, last ingest time and size on disk of one collection "
                                  "(admin). A full scan of the collection's keys: for an operator, not a hot path.")
    async def collection_stats(self, info: Info[Context, None], namespace: str, collection: str) -> CollectionStats:
        stats = await _admin(info).stats(info.context.principal, namespace, collection)
        return CollectionStats.from_domain(stats)

    @strawberry.field(description="The sources of one collection in sourceId order, `first` (1-1000) at a time "
                                  "after the cursor `after` (admin).")
    async def sources(self, info: Info[Context, None], namespace: str, collection: str, first: int = 50,
                      after: str | None = None) -> SourcePage:
        page = await _admin(info).sources(info.context.principal, namespace, collection, first, after)
        return SourcePage.from_domain(page)


@strawberry.type
class AdminMutation:
    @strawberry.mutation(description=(
        "Rewrite one collection from its live rows, as `gateway compact` does (admin): milvus-lite's BM25 "
        "statistics then forget deleted rows. Searches of the collection fail while it is rewritten."))
    async def compact_collection(self, info: Info[Context, None], namespace: str, collection: str) -> CompactResult:
        result = await _admin(info).compact(info.context.principal, namespace, collection)
        return CompactResult.from_domain(result)

    @strawberry.mutation(description="Delete every source, chunk and parent of one collection; the collection "
                                     "stays configured and empty (admin). Audited.")
    async def clear_collection(self, info: Info[Context, None], namespace: str, collection: str) -> ClearResult:
        result = await _admin(info).clear(info.context.principal, namespace, collection)
        return ClearResult(collection=result.collection, sources_deleted=result.sources,
                           chunks_deleted=result.chunks)
