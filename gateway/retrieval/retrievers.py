"""Dense, sparse (BM25) and hybrid retrieval over one collection."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol, TypeVar

import numpy as np

from gateway.admission.scheduler import offload, spare_workers
from gateway.embedding.base import Embedder, Modality, modalities_of
from gateway.embedding.modal import check_query_modality, collection_embedder, embed_query
from gateway.errors import ModeNotSupported, allowed
from gateway.storage.vectors import check_dimension
from gateway.retrieval.fusion import alpha_weights, chunk_key, fuse, fuse_scores, source_key
from gateway.retrieval.hit import Hit, Provenance, SignalScore, chunk_row_id, normalised_score
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.storage.analyzer import analyzer_for
from gateway.storage.filters import compile_filter
from gateway.storage.milvus import MilvusStore, ScoredChunk, StoredChunk
from gateway.tenancy.registry import CollectionRef


T = TypeVar("T")
# A returned row: the row, each signal's score for it, its score, its fused score (None: one signal).
_Picked = tuple[ScoredChunk, tuple[SignalScore, ...], float, float | None]


class Retriever(Protocol):
    """Anything that turns a query into ranked hits."""

    async def retrieve(self, query: Query, options: SearchOptions) -> list[Hit]: ...


def supported_modes(embedder: object | None) -> tuple[Mode, ...]:
    """Dense needs an embedder; sparse needs the BM25 field, which every collection has. An image
    collection's encoder maps no text, and its rows have no words to match: dense only."""
    if embedder is not None and Modality.TEXT not in modalities_of(embedder):
        return (Mode.DENSE,)
    return (Mode.DENSE, Mode.SPARSE, Mode.HYBRID) if embedder is not None else (Mode.SPARSE,)


class CollectionRetriever:
    """Searches one tenant collection in the requested mode; hybrid is fused in the gateway.

    Fusion runs here rather than in Milvus's hybrid_search so that every hit keeps each
    signal's raw score and rank in its provenance, and so that DBSF and `weighted` mean the
    same on milvus-lite and on a server (see docs/benchmarks.md for the measured comparison).
    """

    def __init__(self, store: MilvusStore, embedder: Embedder | None, ref: CollectionRef,
                 route: str | None = None) -> None:
        self._store = store
        # The encoder of this collection's vectors: the gateway's text embedder, or its image encoder.
        self._embedder = collection_embedder(ref.config, embedder)
        self._ref = ref
        self._route = route
        self._analyzer = analyzer_for(ref.config.language)
        # A process that only searches learns the collection's search depth (index.ef, nprobe) here.
        store.set_index_policy(ref.scope, ref.config.index.policy())

    @property
    def ref(self) -> CollectionRef:
        return self._ref

    async def retrieve(self, query: Query, options: SearchOptions) -> list[Hit]:
        """The ranked hits. Candidates are ranked and fused on ids and scores, and a `Hit` (with its
        provenance) is built only for the `limit` returned. When the searches rank more rows than
        that, they fetch identities only, and the returned rows' stored fields come in one lookup
        by primary key (`MilvusStore.fill`): ten rows' text instead of a hundred's."""
        options = dataclasses.replace(options, fields=self.searched_fields(options.fields))
        late = self._fills_late(options)
        searched = frozenset() if late else options.fields

        def pick(rows: dict[str, list[ScoredChunk]]) -> list[_Picked]:
            picked = self._pick(rows, options)
            if not late:
                return picked
            filled = {row.row_id: row for row in self._store.fill(self._ref.scope, [p[0] for p in picked],
                                                                  options.fields)}
            # A row deleted since the search is left out, as if the search had run a moment later.
            return [(filled[p[0].row_id], *p[1:]) for p in picked if p[0].row_id in filled]

        mode, picked = await self._signal_rows(query, options, searched, pick, blocking=late)
        return [self._hit(row, scores, score, fused, mode) for row, scores, score, fused in picked]

    def _fills_late(self, options: SearchOptions) -> bool:
        """Whether the searches should fetch identities only, and the returned rows be filled after:
        when the caller reads stored fields, and the searches rank more rows than are returned."""
        signals = 2 if options.mode is Mode.HYBRID else 1
        return self.fills(options) and signals * max(options.candidates, options.limit) > options.limit

    def _pick(self, rows: dict[str, list[ScoredChunk]], options: SearchOptions) -> list[_Picked]:
        """The rows returned, best first, within the threshold: each with its signals' scores, its
        score and its fused score (None for a single signal)."""
        if len(rows) == 1:
            ((signal, ranked),) = rows.items()
            best = ranked[0].score if ranked else 0.0
            picked = [(row, (SignalScore(signal, row.score, rank, normalised_score(signal, row.score, best)),),
                       row.score, None) for rank, row in enumerate(ranked[:options.limit], start=1)]
        else:
            picked = self._fused(rows, options)
        if options.threshold is not None:
            picked = [p for p in picked if p[2] >= options.threshold]
        return picked

    def _fused(self, rows: dict[str, list[ScoredChunk]], options: SearchOptions) -> list[_Picked]:
        identity = _source_of if options.group_by_source else _chunk_of
        # Each candidate's first row and its (signal, raw score, rank) per list, as plain tuples:
        # SignalScore values are made only for the hits returned.
        first: dict[tuple[str, ...], tuple[ScoredChunk, list[tuple[str, float, int]]]] = {}
        lists = []
        for signal in ("dense", "sparse"):  # the order alpha's (dense, sparse) weights follow
            entries = []
            for rank, row in enumerate(rows[signal], start=1):
                key = identity(row)
                entries.append((key, row.score))
                seen = first.get(key)
                if seen is None:
                    first[key] = (row, [(signal, row.score, rank)])
                else:
                    seen[1].append((signal, row.score, rank))
            lists.append(entries)
        fused = fuse_scores(options.fusion, lists, tie=lambda key: _row_id(first[key][0]),
                            weights=alpha_weights(options.alpha), limit=options.limit, k=options.rrf_k)
        best = {signal: ranked[0].score if ranked else 0.0 for signal, ranked in rows.items()}
        return [(first[key][0], tuple(SignalScore(signal, raw, rank, normalised_score(signal, raw, best[signal]))
                                      for signal, raw, rank in first[key][1]), total, total)
                for key, total in fused]

    def effective_mode(self, query: Query, options: SearchOptions) -> Mode:
        """The mode a search really runs. The documented rule: a hybrid query with no BM25 terms
        (only stop words or punctuation) runs dense only, and `notices` says so."""
        if options.mode is Mode.HYBRID and not self._has_terms(query):
            return Mode.DENSE
        return options.mode

    def notices(self, query: Query, options: SearchOptions) -> tuple[str, ...]:
        """What the caller should know about how this search ran differently from what was asked."""
        if self._has_terms(query) or options.mode is Mode.DENSE:
            return ()
        if options.mode is Mode.HYBRID:
            return ("hybrid search ran dense only: the query has no BM25 terms after stop-word removal",)
        return ("sparse search found nothing: the query has no BM25 terms after stop-word removal; "
                "use at least one non-stop word, or mode 'dense' or 'hybrid'",)

    def _has_terms(self, query: Query) -> bool:
        return bool(self._analyzer.terms(query.text))

    async def signal_lists(self, query: Query, options: SearchOptions) -> dict[str, list[Hit]]:
        """Each signal's ranked hits before fusion (grouped per source when asked)."""
        mode, rows = await self._signal_rows(query, options, self.searched_fields(options.fields), _as_is,
                                             blocking=False)
        return {signal: self._hits(ranked, signal, mode) for signal, ranked in rows.items()}

    async def _signal_rows(self, query: Query, options: SearchOptions, fields: frozenset[str] | None,
                           finish: Callable[[dict[str, list[ScoredChunk]]], T], *, blocking: bool) -> tuple[Mode, T]:
        """The mode the search runs in, and `finish` of each signal's ranked rows (one per source when
        grouped) with `fields` fetched. The query embedding, the searches and `finish` are one job on a
        worker: each hop between threads costs more CPU than the Python around it on a busy machine.
        Only when two workers are idle do a hybrid search's signals run side by side, and then a
        `blocking` finish (one that reads the store) is a job of its own."""
        if query.image is not None:
            # Before any signal runs: a sparse or hybrid search would otherwise match the label text.
            check_query_modality(self._embedder, self._ref.label, Modality.IMAGE)
        modes = supported_modes(self._embedder)
        if options.mode not in modes and modes == (Mode.DENSE,):
            raise ModeNotSupported(
                f"mode {options.mode.value!r} matches words, and collection {self._ref.label!r} holds images "
                f"(encoder {self._embedder.name!r}); supported here: dense")  # type: ignore[union-attr]
        if options.mode not in modes:
            raise ModeNotSupported(
                f"mode {options.mode.value!r} needs an embedder, and none is configured for "
                f"collection {self._ref.label!r}; supported here: {allowed(m.value for m in modes)}")
        where = compile_filter(options.filter, self._ref.config.metadata_fields) if options.filter else None
        depth = max(options.candidates, options.limit)
        group = _best_row_per_source if options.group_by_source else list
        scope = self._ref.scope
        mode = self.effective_mode(query, options)

        def dense(vector: Callable[[], np.ndarray]) -> list[ScoredChunk]:
            return group(self._store.search_dense(scope, vector(), depth, where, fields))

        def sparse() -> list[ScoredChunk]:
            return group(self._store.search_sparse(scope, query.text, depth, where, fields, self._analyzer))

        if mode is Mode.DENSE:
            return mode, await offload(lambda vector: finish({"dense": dense(vector)}), self._vector_of(query))
        if options.mode is Mode.SPARSE:
            return mode, await offload(lambda: finish({"sparse": sparse()}))
        if not spare_workers(2):  # under load: both signals and the finish in one hand-off
            def both(vector: Callable[[], np.ndarray]) -> T:
                # The store ranks by BM25 while this worker embeds the query and searches by vector.
                sparse_rows = self._store.sparse_later(scope, query.text, depth, where, fields, self._analyzer)
                dense_rows = dense(vector)
                return finish({"dense": dense_rows, "sparse": group(sparse_rows())})

            return mode, await offload(both, self._vector_of(query))
        dense_rows, sparse_rows = await asyncio.gather(offload(dense, self._vector_of(query)), offload(sparse))
        rows = {"dense": dense_rows, "sparse": sparse_rows}
        return mode, (await offload(finish, rows) if blocking else finish(rows))

    def _vector_of(self, query: Query) -> Callable[[], np.ndarray]:
        """How to get the query's vector on a worker (embedding is blocking work); refusals come now."""
        assert self._embedder is not None
        if query.image is not None:
            # An image query is embedded per collection: only a collection whose encoder maps
            # images can take it (embed_query refuses the others, naming what they map).
            return partial(embed_query, self._embedder, self._ref.label, text=query.text, image=query.image,
                           tenant=self._ref.scope.tenant)
        check_query_modality(self._embedder, self._ref.label, Modality.TEXT)
        if query.vector is not None:
            vector = query.vector
            check_dimension(vector, self._embedder.dim, "query vector", self._ref.label)
            return lambda: vector
        return partial(self._embedder.embed_query, query.text, self._ref.scope.tenant)  # type: ignore[union-attr]

    def _hits(self, rows: Sequence[ScoredChunk], signal: str, mode: Mode) -> list[Hit]:
        best = rows[0].score if rows else 0.0
        return [self._hit(row, (SignalScore(signal, row.score, rank, normalised_score(signal, row.score, best)),),
                          row.score, None, mode) for rank, row in enumerate(rows, start=1)]

    def _hit(self, row: ScoredChunk, scores: tuple[SignalScore, ...], score: float,
             fused_score: float | None, mode: Mode) -> Hit:
        scope, chunk = self._ref.scope, row.chunk
        provenance = Provenance(
            tenant=scope.tenant, namespace=chunk.namespace, collection=scope.collection,
            trust_tier=self._ref.config.record_tier(chunk.metadata).value, retriever="collection", mode=mode.value,
            route=self._route, scores=scores, fused_score=fused_score, **_stored_provenance(chunk))
        return Hit(namespace=chunk.namespace, collection=scope.collection, source_id=chunk.source_id,
                   chunk_id=chunk.chunk_id, score=score, provenance=provenance, **_stored_hit(chunk))

    def fills(self, options: SearchOptions) -> bool:
        """Whether the caller reads stored fields, so that searches may fetch identities only and the
        hits returned be filled after (a federated search's merged hits: `fill`)."""
        return options.fields is None or bool(options.fields)

    async def fill(self, hits: Sequence[Hit], fields: frozenset[str] | None) -> list[Hit]:
        """`hits` of this collection, searched with identities only, with their stored `fields`
        (None: every one) fetched by primary key (`MilvusStore.fill`); a row deleted since is left out."""
        if not hits:
            return []
        physical = self._store.physical(self._ref.scope)
        rows = [ScoredChunk({"id": physical.row_key(hit.id), "namespace": hit.namespace, "source_id": hit.source_id,
                             "chunk_id": hit.chunk_id}, hit.score) for hit in hits]
        filled = {row.identity: row.chunk for row in await offload(self._store.fill, self._ref.scope, rows,
                                                                   self.searched_fields(fields))}
        config = self._ref.config
        return [with_stored(hit, filled[key], config.record_tier(filled[key].metadata).value) for hit in hits
                if (key := (hit.namespace, hit.source_id, hit.chunk_id)) in filled]

    def searched_fields(self, fields: frozenset[str] | None) -> frozenset[str] | None:
        """The stored fields a search must fetch for a caller that reads `fields`: with `trust_by`, also the
        metadata, which a hit's trust tier is read from (a caller that reads no stored field reads no tier)."""
        if not fields or self._ref.config.trust_by is None:
            return fields
        return fields | {"metadata"}


def with_stored(hit: Hit, chunk: StoredChunk, trust_tier: str | None = None) -> Hit:
    """`hit` with the stored fields of `chunk` (its own row, fetched again), score and signals kept; with
    `trust_tier`, the tier read from the row's metadata."""
    tier = {} if trust_tier is None else {"trust_tier": trust_tier}
    return dataclasses.replace(hit, provenance=dataclasses.replace(hit.provenance, **_stored_provenance(chunk), **tier),
                               **_stored_hit(chunk))


def _stored_hit(chunk: StoredChunk) -> dict[str, Any]:
    """A hit's fields that come from its stored row (besides its identity)."""
    return {"content": chunk.text, "metadata": chunk.metadata, "title": chunk.title or None,
            "source_url": chunk.source_url or None, "source_path": chunk.source_path or None,
            "parent_key": chunk.parent_key or None, "modality": chunk.modality}


def _stored_provenance(chunk: StoredChunk) -> dict[str, Any]:
    """A provenance's fields that come from the hit's stored row."""
    return {"content_hash": chunk.content_hash, "ingested_at": epoch_ms_to_datetime(chunk.created_at),
            "updated_at": epoch_ms_to_datetime(chunk.updated_at)}


def combine(lists: dict[str, list[Hit]], options: SearchOptions) -> list[Hit]:
    """One ranked list from per-signal lists: fused when there are two, then limit and threshold."""
    if len(lists) == 1:
        hits = next(iter(lists.values()))
    else:
        # Fusion rescores only the hits it returns: ~80 candidates fuse, `limit` are rebuilt.
        hits = fuse(options.fusion, [lists["dense"], lists["sparse"]], weights=alpha_weights(options.alpha),
                    k=options.rrf_k, limit=options.limit, key=source_key if options.group_by_source else chunk_key)
    return within_threshold(hits[:options.limit], options)


def within_threshold(hits: list[Hit], options: SearchOptions) -> list[Hit]:
    if options.threshold is None:
        return hits
    return [h for h in hits if h.score >= options.threshold]


def _as_is(rows: dict[str, list[ScoredChunk]]) -> dict[str, list[ScoredChunk]]:
    return rows


# A collection's rows share its tenant and collection: namespace, source and chunk tell them apart.
def _chunk_of(row: ScoredChunk) -> tuple[str, ...]:
    return row.identity


def _source_of(row: ScoredChunk) -> tuple[str, ...]:
    return (row.namespace, row.source_id)


def _row_id(row: ScoredChunk) -> str:
    return chunk_row_id(row.namespace, row.source_id, row.chunk_id)


def _best_row_per_source(rows: Sequence[ScoredChunk]) -> list[ScoredChunk]:
    """Each source's best-ranked row, in rank order (`best_per_source` for rows)."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for row in rows:
        if (source := _source_of(row)) not in seen:
            seen.add(source)
            kept.append(row)
    return kept


def epoch_ms_to_datetime(epoch_ms: int) -> datetime | None:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC) if epoch_ms else None
