"""The search service: resolve the tenant's target collection(s), retrieve, trace."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from opentelemetry import trace as otel

from gateway.embedding.base import Embedder
from gateway.errors import InvalidInput, LimitExceeded, UnknownCollection, UnknownSource, allowed
from gateway.retrieval.defaults import options_for
from gateway.retrieval.hit import Hit
from gateway.retrieval.options import Fusion, Mode, Query
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.retrieval.trace import Phase, Trace, TraceRecorder
from gateway.settings import Settings
from gateway.storage.filters import FilterNode
from gateway.storage.milvus import MilvusStore, StoredChunk
from gateway.tenancy.auth import Principal
from gateway.tenancy.registry import CollectionRef, TenantRegistry


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str
    namespace: str | None = None
    collection: str | None = None
    mode: Mode | None = None
    limit: int | None = None
    threshold: float | None = None
    filter: FilterNode | None = None
    fusion: Fusion | None = None
    alpha: float | None = None


@dataclass(frozen=True, slots=True)
class SearchResult:
    hits: tuple[Hit, ...]
    trace: Trace


@dataclass(frozen=True, slots=True)
class SourceResult:
    ref: CollectionRef
    chunks: tuple[StoredChunk, ...]


class Searcher:
    """Everything a reader can do; the tenant always comes from the principal."""

    def __init__(self, registry: TenantRegistry, store: MilvusStore, embedder: Embedder | None,
                 settings: Settings, tracer: otel.Tracer | None = None) -> None:
        self._tracer = tracer or otel.get_tracer("gateway")
        self._registry = registry
        self._store = store
        self._embedder = embedder
        self._settings = settings

    @property
    def registry(self) -> TenantRegistry:
        return self._registry

    def validate_query(self, text: str) -> str:
        stripped = text.strip()
        if not stripped:
            raise InvalidInput("query is empty; send at least one word")
        if len(text) > self._settings.max_query_chars:
            raise LimitExceeded(f"query is {len(text)} characters; at most {self._settings.max_query_chars} are allowed")
        return stripped

    async def search(self, principal: Principal, request: SearchRequest,
                     recorder: TraceRecorder | None = None) -> SearchResult:
        recorder = recorder or TraceRecorder(self._tracer)
        text = self.validate_query(request.query)
        with recorder.stage("route", Phase.ROUTE) as stage:
            ref, route = self._target(principal, request)
            stage.detail.update({"router": "explicit" if request.collection else "single-collection",
                                 "routes": [ref.label], "candidates": [ref.label]})
            stage.output_count = 1
        options = options_for(ref.config, mode=request.mode, limit=request.limit, fusion=request.fusion,
                              alpha=request.alpha, threshold=request.threshold, filter=request.filter,
                              max_limit=self._settings.max_limit)
        with recorder.stage(f"retrieve:{ref.label}", Phase.RETRIEVE, input_count=1) as stage:
            await asyncio.to_thread(self._store.ensure, ref.scope)
            hits = await CollectionRetriever(self._store, self._embedder, ref, route=route).retrieve(Query(text), options)
            stage.detail.update({"mode": options.mode.value, "fusion": options.fusion.value})
            stage.hits(hits)
        return SearchResult(tuple(hits), recorder.finish())

    def _target(self, principal: Principal, request: SearchRequest) -> tuple[CollectionRef, str]:
        if request.collection is not None:
            return self._registry.resolve(principal.tenant, request.collection, namespace=request.namespace), "explicit"
        candidates = self._registry.collections(principal.tenant, request.namespace)
        if len(candidates) == 1:
            return candidates[0], "only-collection"
        raise UnknownCollection(f"no collection named and tenant {principal.tenant!r} has several; "
                                f"name one of: {allowed(c.label for c in candidates)}")

    def collections(self, principal: Principal) -> list[CollectionRef]:
        return self._registry.collections(principal.tenant)

    async def chunk_count(self, ref: CollectionRef) -> int:
        exists = await asyncio.to_thread(self._store.open_existing, ref.scope)
        return await asyncio.to_thread(self._store.count, ref.scope) if exists else 0

    async def source(self, principal: Principal, namespace: str, source_id: str,
                     collection: str | None = None) -> SourceResult:
        """All chunks of one source, in order, for a citation UI."""
        if collection is not None:
            refs = [self._registry.resolve(principal.tenant, collection, namespace=namespace)]
        else:
            refs = self._registry.collections(principal.tenant, namespace)
        for ref in refs:
            if not await asyncio.to_thread(self._store.open_existing, ref.scope):
                continue
            chunks = await asyncio.to_thread(self._store.source_chunks, ref.scope, source_id)
            if chunks:
                return SourceResult(ref, tuple(chunks))
        raise UnknownSource(f"source {source_id!r} is not in namespace {namespace!r} "
                            f"(searched: {allowed(r.label for r in refs)})")
