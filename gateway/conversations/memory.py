"""Agent memory: a `kind: memory` collection and its retriever.

A memory is one row of an ordinary chunk collection (so dense, BM25, filters, federation and
the tenant boundary all work unchanged): its content is the text, `created_at` its time, and
`metadata` holds `user_id`, `memory_type` and `importance`. Retrieval fetches the collection's
`candidates` most relevant memories and re-scores them

    score = alpha * recency + beta * relevance + gamma * importance
    recency = 0.5 ** (age_days / half_life_days)

with relevance in [0, 1]: the cosine similarity (clipped at 0) in dense mode, the BM25 score over
the best BM25 score of the candidates in sparse mode, and the mean of both in hybrid mode. Every
term is in [0, 1], so the score is an absolute value, comparable between queries. The result is
one signal, `memory`, whose raw parts are in the provenance (`memory:recency`, `memory:relevance`,
`memory:importance`); federated search merges it like any single-signal collection.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gateway.admission.scheduler import offload
from gateway.conversations.identifiers import check_user_id
from gateway.embedding.base import Embedder
from gateway.errors import Forbidden, InvalidInput, ModeNotSupported, allowed
from gateway.ingest.hashing import content_hash
from gateway.retrieval.hit import Hit, SignalScore
from gateway.retrieval.options import Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever, combine
from gateway.storage.identifiers import check_source_id
from gateway.storage.milvus import ChunkRecord, MilvusStore, StoredChunk
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import CollectionKind, MemoryConfig, Role
from gateway.tenancy.registry import CollectionRef, TenantRegistry

DAY_MS = 86_400_000
SIGNAL = "memory"
_SCORED_FIELDS = frozenset({"created_at", "metadata"})


def recency(created_ms: int, now_ms: int, half_life_days: float) -> float:
    """1 for a memory written now, 0.5 after one half-life; a future time counts as now."""
    age_days = max(0, now_ms - created_ms) / DAY_MS
    return 0.5 ** (age_days / half_life_days)


def memory_score(recent: float, relevance: float, importance: float, config: MemoryConfig) -> float:
    return config.alpha * recent + config.beta * relevance + config.gamma * importance


def importance_of(hit: Hit) -> float:
    value = hit.metadata.get("importance")
    return min(1.0, max(0.0, float(value))) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


class MemoryRetriever(CollectionRetriever):
    """A memory collection's retriever: relevance candidates re-scored by recency and importance."""

    def __init__(self, store: MilvusStore, embedder: Embedder | None, ref: CollectionRef,
                 route: str | None = None, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store, embedder, ref, route)
        assert ref.config.memory is not None
        self._config = ref.config.memory
        self._clock = clock

    async def retrieve(self, query: Query, options: SearchOptions) -> list[Hit]:
        # Every candidate is rescored by recency and importance, so all of them become hits.
        return combine(await self.signal_lists(query, options), options)

    async def signal_lists(self, query: Query, options: SearchOptions) -> dict[str, list[Hit]]:
        if options.fields is not None:
            # The score reads the memory's time and importance, whatever the caller selects.
            options = replace(options, fields=options.fields | _SCORED_FIELDS)
        lists = await super().signal_lists(query, options)
        relevance: dict[tuple[str, str, str, str], list[float]] = {}
        first: dict[tuple[str, str, str, str], Hit] = {}
        for signal, hits in lists.items():
            best = max((h.score for h in hits), default=0.0)
            for hit in hits:
                value = max(0.0, min(1.0, hit.score)) if signal == "dense" else (hit.score / best if best > 0 else 0.0)
                relevance.setdefault(hit.key, []).append(value)
                first.setdefault(hit.key, hit)
        now = int(self._clock() * 1000)
        scored = []
        for key, hit in first.items():
            parts = relevance[key]
            rel = sum(parts) / len(lists)  # a hit missing from one signal counts 0 there
            rec = recency(int(hit.provenance.ingested_at.timestamp() * 1000) if hit.provenance.ingested_at else 0,
                          now, self._config.half_life_days)
            imp = importance_of(hit)
            scored.append((memory_score(rec, rel, imp, self._config), hit, rec, rel, imp))
        scored.sort(key=lambda item: (-item[0], item[1].qualified_id))
        out = []
        for rank, (score, hit, rec, rel, imp) in enumerate(scored, start=1):
            signals = tuple(s for s in hit.provenance.scores) + (
                SignalScore("memory:recency", rec, rank), SignalScore("memory:relevance", rel, rank),
                SignalScore("memory:importance", imp, rank), SignalScore(SIGNAL, score, rank))
            out.append(replace(hit, score=score, provenance=replace(hit.provenance, scores=signals,
                                                                    retriever="memory")))
        return {SIGNAL: out}


def owned(principal: Principal, ref: CollectionRef, chunks: Sequence[StoredChunk]) -> bool:
    """Whether a key may see these rows: any key sees a documents collection's; a key bound to a
    user (api_keys[].user_id) sees a memory collection's only when they are that user's."""
    if principal.user_id is None or ref.config.kind is not CollectionKind.MEMORY:
        return True
    return all(c.metadata.get("user_id") == principal.user_id for c in chunks)


def check_bound_writer(principal: Principal, ref: CollectionRef) -> None:
    """A key bound to a user writes memories through addMemory only, never as documents."""
    if principal.user_id is not None and ref.config.kind is CollectionKind.MEMORY:
        raise Forbidden(f"this key is bound to user {principal.user_id!r}: it may write to the memory collection "
                        f"{ref.label!r} only through addMemory, as that user")


def retriever_for(store: MilvusStore, embedder: Embedder | None, ref: CollectionRef,
                  route: str | None = None) -> CollectionRetriever:
    """The retriever a collection's kind calls for."""
    if ref.config.kind is CollectionKind.MEMORY:
        return MemoryRetriever(store, embedder, ref, route)
    return CollectionRetriever(store, embedder, ref, route)


@dataclass(frozen=True, slots=True)
class Memory:
    """A memory as written."""

    id: str
    namespace: str
    collection: str
    content: str
    user_id: str
    memory_type: str
    importance: float
    created_at: int  # epoch milliseconds


class MemoryWriter:
    """addMemory: one row a memory, embedded and written into the caller's memory collection."""

    def __init__(self, registry: TenantRegistry, store: MilvusStore, embedder: Embedder | None,
                 clock: Callable[[], float] = time.time) -> None:
        self._registry = registry
        self._store = store
        self._embedder = embedder
        self._clock = clock

    async def add(self, principal: Principal, namespace: str, collection: str, content: str, *,
                  user_id: str, memory_type: str, importance: float, memory_id: str | None = None) -> Memory:
        principal.require(Role.WRITER, "add memories")
        ref = self._registry.resolve(principal.tenant, collection, namespace=namespace)
        config = ref.config.memory
        if ref.config.kind is not CollectionKind.MEMORY or config is None:
            memories = [r.label for r in self._registry.collections(principal.tenant)
                        if r.config.kind is CollectionKind.MEMORY]
            raise InvalidInput(f"collection {ref.label!r} is kind 'documents', not 'memory'; memory collections "
                               f"of tenant {principal.tenant!r}: {allowed(memories)}")
        text = content.strip()
        if not text or len(content) > config.max_chars:
            raise InvalidInput(f"memory content is {len(content)} characters; send 1 to {config.max_chars} "
                               "non-blank characters")
        check_user_id(user_id)
        if principal.user_id is not None and user_id != principal.user_id:
            raise Forbidden(f"this key is bound to user {principal.user_id!r}; it may not write memories of user "
                            f"{user_id!r}")
        if memory_type not in config.types:
            raise InvalidInput(f"memoryType {memory_type!r} is not a type of {ref.label!r}; allowed: "
                               f"{allowed(config.types)}")
        if not 0.0 <= importance <= 1.0:
            raise InvalidInput(f"importance {importance!r} is out of range; allowed: 0 to 1")
        if memory_id is not None:
            check_source_id(memory_id)
            if principal.user_id is not None and await offload(self._store.open_existing, ref.scope):
                existing = await offload(self._store.source_chunks, ref.scope, memory_id)
                if not owned(principal, ref, existing):
                    raise Forbidden(f"memory {memory_id!r} is another user's; a key bound to user "
                                    f"{principal.user_id!r} may replace only its own")
        if self._embedder is None:
            raise ModeNotSupported("this gateway has no embedder configured, so it cannot store memories")
        now = int(self._clock() * 1000)
        memory = Memory(memory_id or f"mem-{uuid.uuid4().hex}", ref.scope.namespace, ref.scope.collection,
                        text, user_id, memory_type, importance, now)
        vector = (await offload(self._embedder.embed_documents, [text]))[0]
        metadata = {"user_id": user_id, "memory_type": memory_type, "importance": importance}
        record = ChunkRecord(source_id=memory.id, chunk_id="0", parent_key="", text=text, title="",
                             content_hash=content_hash(text=text, metadata=metadata, model=self._embedder.name), created_at=now,
                             updated_at=now, dense=vector, metadata=metadata)
        await offload(self._store.ensure, ref.scope)
        await offload(self._store.upsert_chunks, ref.scope, [record])
        return memory
