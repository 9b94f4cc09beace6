"""expand: add 1-hop neighbours of the top seed hits, marked in provenance (`via`).

A neighbour is a source that a seed links to (`metadata.links: [sourceId, ...]`, given at
ingest) or, with inferred edges, a source whose chunk is similar to the seed chunk (edges
computed at ingest when the collection sets `graph.infer_threshold`). For each collection one
search, restricted to the neighbour sources, picks each neighbour's chunk that best matches the
question. At most `cap` neighbours are added; sources already among the hits are not added again.

A neighbour is scored on the scale of the hits it joins, whatever the mode produced them (a
cosine, BM25, or an RRF sum near 0.016): `floor + weight x (seed - floor)`, where `floor` is the
score of the last hit within the request's `limit`. It so ranks between its seed and that hit,
and reaches the client unless a later stage re-ranks it; one that ends past the limit (more
neighbours than room, or `weight: 0`) is named in the trace rather than listed as added.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.admission.scheduler import offload
from gateway.embedding.base import Embedder
from gateway.retrieval.hit import Hit, Provenance, SignalScore
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.retrievers import epoch_ms_to_datetime
from gateway.retrieval.trace import StageHandle
from gateway.storage.edges import EdgeStore
from gateway.storage.filters import And, Condition, FilterNode, Op, compile_filter
from gateway.storage.identifiers import MAX_SOURCE_ID_CHARS
from gateway.storage.milvus import MilvusStore, ScoredChunk
from gateway.storage.schema import Scope
from gateway.tenancy.config import MEMORY_FIELDS
from gateway.tenancy.pipelines import ExpandParams, OnError


@dataclass(frozen=True, slots=True)
class _Lead:
    """A neighbour source reached from a seed."""

    seed: Hit
    source_id: str
    via: str
    score: float


def links_of(hit: Hit) -> list[str]:
    """The source ids a hit's document links to; anything else in `metadata.links` is ignored."""
    links = hit.metadata.get("links")
    if not isinstance(links, list):
        return []
    return [s for s in links if isinstance(s, str) and 0 < len(s) <= MAX_SOURCE_ID_CHARS and s != hit.source_id]


# (namespace, collection, a record's metadata) -> the record's trust tier (CollectionConfig.record_tier).
TierOf = Callable[[str, str, Mapping[str, Any]], str]


class LinkExpand:
    name = "expand"
    depth = 0

    def __init__(self, params: ExpandParams, store: MilvusStore, embedder: Embedder | None,
                 tier_of: TierOf | None = None) -> None:
        self.on_error: OnError = params.on_error
        self._params = params
        self._store = store
        self._edges = EdgeStore(store)
        self._embedder = embedder
        # Without one, a neighbour takes its seed's tier (the same collection's).
        self._tier_of = tier_of

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        params = self._params
        seeds = hits[:params.seeds]
        floor = _floor(hits, request.limit)
        present = {(h.namespace, h.collection, h.source_id) for h in hits}
        leads: dict[tuple[str, str, str], _Lead] = {}

        def lead(seed: Hit, source_id: str, via: str) -> None:
            key = (seed.namespace, seed.collection, source_id)
            score = floor + params.weight * (seed.score - floor)
            if key not in present and (key not in leads or score > leads[key].score):
                leads[key] = _Lead(seed, source_id, via, score)

        if params.edges in ("links", "both"):
            for seed in seeds:
                for source_id in links_of(seed):
                    lead(seed, source_id, f"link from {seed.qualified_id}")
        inferred = 0
        if params.edges in ("inferred", "both"):
            for scope, group in _by_scope(seeds).items():
                edges = await offload(self._edges.neighbours, scope, [h.id for h in group])
                by_row = {h.id: h for h in group}
                for edge in edges:
                    inferred += 1
                    lead(by_row[edge.from_row], edge.to_source,
                         f"similar to {by_row[edge.from_row].qualified_id} ({edge.similarity:.2f})")
        chosen = sorted(leads.values(), key=lambda x: (-x.score, x.source_id))[:params.cap]
        fetched = await self._fetch(request, chosen)
        new = {h.key for h in fetched}
        # On a tie a hit the search found stays ahead of a neighbour.
        out = sorted([*hits, *fetched], key=lambda h: (-h.score, h.key in new, h.qualified_id))
        shown = {h.key for h in out[:request.limit]}
        added = [h.qualified_id for h in fetched if h.key in shown]
        beyond = [h.qualified_id for h in fetched if h.key not in shown]
        handle.detail.update({"seeds": len(seeds), "leads": len(leads), "inferredEdges": inferred,
                              "added": added, "beyondLimit": beyond, "weight": params.weight, "floor": floor})
        if beyond:
            handle.warn(f"{len(beyond)} neighbour(s) ranked past the limit of {request.limit} and are not "
                        f"returned: {', '.join(beyond[:5])}")
        return out

    async def _fetch(self, request: StageRequest, chosen: list[_Lead]) -> list[Hit]:
        groups: dict[Scope, list[_Lead]] = {}
        for item in chosen:
            seed = item.seed
            groups.setdefault(Scope(seed.provenance.tenant, seed.namespace, seed.collection), []).append(item)
        if not groups:
            return []
        vector = None
        if self._embedder is not None:
            vector = await offload(self._embedder.embed_query, request.question, next(iter(groups)).tenant)
        # The question's text vector fits text collections only; an image collection's neighbours
        # are picked by caption words (its vectors are in its image encoder's space).
        results = await asyncio.gather(*(self._best_chunks(
            scope, items, request, vector if all(i.seed.modality == "text" for i in items) else None)
            for scope, items in groups.items()))
        return [hit for group in results for hit in group]

    async def _best_chunks(self, scope: Scope, items: list[_Lead], request: StageRequest, vector) -> list[Hit]:
        # A neighbour must pass the request's own filter, like every hit the search returned.
        node: FilterNode = Condition("source_id", Op.IN, tuple(i.source_id for i in items))
        held = request.scope_filters.get((scope.namespace, scope.collection))
        for extra in (request.filter, held):
            if extra is not None:
                node = And((extra, node))
        # A held filter names the memory collection's own keys, which other targets may not declare.
        where = compile_filter(node, request.metadata_fields | frozenset(MEMORY_FIELDS if held is not None else ()))
        depth = 4 * len(items)  # several chunks a source, so every neighbour's best one is in reach
        if vector is not None:
            rows = await offload(self._store.search_dense, scope, vector, depth, where)
        else:
            rows = await offload(self._store.search_sparse, scope, request.question, depth, where)
        best: dict[str, ScoredChunk] = {}
        for row in rows:
            best.setdefault(row.source_id, row)
        out = []
        for item in items:
            row = best.get(item.source_id)
            if row is not None:
                tier = (self._tier_of(scope.namespace, scope.collection, row.chunk.metadata)
                        if self._tier_of is not None else item.seed.provenance.trust_tier)
                out.append(_neighbour(item, row, tier))
        return out


def _floor(hits: list[Hit], limit: int) -> float:
    """The score of the last hit that reaches the client (0 when there are no hits)."""
    if not hits:
        return 0.0
    scores = sorted((h.score for h in hits), reverse=True)
    return scores[min(limit, len(scores)) - 1]


def _by_scope(hits: list[Hit]) -> dict[Scope, list[Hit]]:
    groups: dict[Scope, list[Hit]] = {}
    for hit in hits:
        groups.setdefault(Scope(hit.provenance.tenant, hit.namespace, hit.collection), []).append(hit)
    return groups


def _neighbour(item: _Lead, row: ScoredChunk, trust_tier: str) -> Hit:
    chunk, seed = row.chunk, item.seed
    provenance = Provenance(
        tenant=seed.provenance.tenant, namespace=chunk.namespace, collection=seed.collection,
        trust_tier=trust_tier, retriever="expand", mode=seed.provenance.mode,
        route=seed.provenance.route, scores=(SignalScore("expand:match", row.score, 1),), fused_score=None,
        content_hash=chunk.content_hash, ingested_at=epoch_ms_to_datetime(chunk.created_at),
        updated_at=epoch_ms_to_datetime(chunk.updated_at), via=item.via)
    return Hit(namespace=chunk.namespace, collection=seed.collection, source_id=chunk.source_id,
               chunk_id=chunk.chunk_id, content=chunk.text, score=item.score, provenance=provenance,
               metadata=chunk.metadata, title=chunk.title or None, source_url=chunk.source_url or None,
               source_path=chunk.source_path or None, parent_key=chunk.parent_key or None)



