"""Admin API fields (role `admin`): collection statistics, source listing, compaction, clearing."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from gateway.admin import service
from gateway.admin.compact import Compacted
from gateway.graphql.context import Context
from gateway.retrieval.retrievers import epoch_ms_to_datetime


_Namespace = Annotated[str, strawberry.argument(description="The collection's namespace")]
_Collection = Annotated[str, strawberry.argument(description="The collection, one of the caller's tenant")]


def _admin(info: Info[Context, None]) -> service.Admin:
    admin = info.context.admin
    assert admin is not None, "create_app builds the admin service"
    return admin


@strawberry.type(description="A collection's dense index as built (docs/configuration.md, \"Dense index\").")
class DenseIndexInfo:
    type: str = strawberry.field(description=(
        "The Milvus index type: FLAT (exact search), HNSW, HNSW_SQ, IVF_FLAT or IVF_SQ8"))
    build: JSON = strawberry.field(description="Its build parameters: M and efConstruction (HNSW), nlist (IVF)")
    search: JSON = strawberry.field(description=(
        "What a search of 10 hits passes: ef (HNSW, raised to the hits asked for) or nprobe (IVF); {} for FLAT"))


@strawberry.type(description="What one collection of the caller's tenant holds (admin).")
class CollectionStats:
    namespace: str = strawberry.field(description="The collection's namespace")
    collection: str = strawberry.field(description="The collection's name")
    chunks: int = strawberry.field(description="Chunks stored (0 before the first ingest)")
    parents: int = strawberry.field(description="Parent records stored")
    sources: int = strawberry.field(description="Distinct sources among the chunks")
    last_ingest_at: datetime | None = strawberry.field(description="The newest chunk's updatedAt; null when empty.")
    storage_bytes: int | None = strawberry.field(
        description="Bytes on disk (milvus-lite); null where the engine cannot tell, and storageNote says why.")
    storage_note: str = strawberry.field(description=(
        "What storageBytes counts, or why it is null (e.g. a Milvus server, or physical collections shared "
        "between tenants)"))
    dense_index: DenseIndexInfo | None = strawberry.field(default=None, description=(
        "The dense index the collection has now (FLAT while small under index.dense: auto); null before the "
        "first ingest"))

    @classmethod
    def from_domain(cls, s: service.CollectionStats) -> CollectionStats:
        index = s.dense_index
        return cls(namespace=s.namespace, collection=s.collection, chunks=s.chunks, parents=s.parents,
                   sources=s.sources, last_ingest_at=epoch_ms_to_datetime(s.last_ingest_ms) if s.last_ingest_ms
                   else None, storage_bytes=s.storage_bytes, storage_note=s.storage_note,
                   dense_index=DenseIndexInfo(type=index.index_type, build=dict(index.build), search=dict(index.search))
                   if index is not None else None)


@strawberry.type(description="One source of a collection: its chunk count and last update.")
class SourceSummary:
    source_id: str = strawberry.field(description="The source's id")
    title: str = strawberry.field(description="The source's title; an empty string when it has none")
    chunks: int = strawberry.field(description="How many chunks the source has")
    updated_at: datetime | None = strawberry.field(description=(
        "When its most recently written chunk was written; null when the store kept no time"))


@strawberry.type(description="A page of a collection's sources in sourceId order; pass nextCursor as `after`.")
class SourcePage:
    sources: list[SourceSummary] = strawberry.field(description="This page's sources, in sourceId order")
    total: int = strawberry.field(description="Sources in the collection, across all pages")
    next_cursor: str | None = strawberry.field(description="Pass as `after` for the next page; null on the last page")

    @classmethod
    def from_domain(cls, p: service.SourcePage) -> SourcePage:
        return cls(sources=[SourceSummary(source_id=s.source_id, title=s.title, chunks=s.chunks,
                                          updated_at=epoch_ms_to_datetime(s.updated_ms) if s.updated_ms else None)
                            for s in p.sources], total=p.total, next_cursor=p.next_cursor)


@strawberry.type(description="What compactCollection did.")
class CompactResult:
    collection: str = strawberry.field(description="The collection, as namespace/collection")
    rows: int = strawberry.field(description="Live rows rewritten (0 when skipped)")
    seconds: float = strawberry.field(description="How long the rewrite took, in seconds (0 when skipped)")
    skipped: str | None = strawberry.field(description=(
        "Why nothing was done (e.g. 'not ingested'); null when the collection was rewritten"))

    @classmethod
    def from_domain(cls, c: Compacted) -> CompactResult:
        return cls(collection=c.collection, rows=c.rows, seconds=c.seconds, skipped=c.skipped)


@strawberry.type(description="What clearCollection deleted.")
class ClearResult:
    collection: str = strawberry.field(description="The collection, as namespace/collection")
    sources_deleted: int = strawberry.field(description="Sources deleted")
    chunks_deleted: int = strawberry.field(description=(
        "Chunks deleted (their parents and token vectors went with them)"))


@strawberry.type
class AdminQuery:
    @strawberry.field(description="Chunks, parents, sources, last ingest time and size on disk of one collection "
                                  "(admin). A full scan of the collection's keys: for an operator, not a hot path.")
    async def collection_stats(self, info: Info[Context, None], namespace: _Namespace,
                               collection: _Collection) -> CollectionStats:
        stats = await _admin(info).stats(info.context.principal, namespace, collection)
        return CollectionStats.from_domain(stats)

    @strawberry.field(description="The sources of one collection in sourceId order, `first` (1-1000) at a time "
                                  "after the cursor `after` (admin).")
    async def sources(self, info: Info[Context, None], namespace: _Namespace, collection: _Collection,
                      first: Annotated[int, strawberry.argument(description=(
                          "Page size: 1 to 1000 sources (LIMIT_EXCEEDED outside); default 50"))] = 50,
                      after: Annotated[str | None, strawberry.argument(description=(
                          "nextCursor of the previous page; omit for the first page"))] = None) -> SourcePage:
        page = await _admin(info).sources(info.context.principal, namespace, collection, first, after)
        return SourcePage.from_domain(page)


@strawberry.type
class AdminMutation:
    @strawberry.mutation(description=(
        "Rewrite one collection from its live rows, as `gateway compact` does (admin): milvus-lite's BM25 "
        "statistics then forget deleted rows. Searches of the collection fail while it is rewritten."))
    async def compact_collection(self, info: Info[Context, None], namespace: _Namespace,
                                 collection: _Collection) -> CompactResult:
        result = await _admin(info).compact(info.context.principal, namespace, collection)
        return CompactResult.from_domain(result)

    @strawberry.mutation(description="Delete every source, chunk and parent of one collection; the collection "
                                     "stays configured and empty (admin). Audited.")
    async def clear_collection(self, info: Info[Context, None], namespace: _Namespace,
                               collection: _Collection) -> ClearResult:
        result = await _admin(info).clear(info.context.principal, namespace, collection)
        return ClearResult(collection=result.collection, sources_deleted=result.sources,
                           chunks_deleted=result.chunks)
