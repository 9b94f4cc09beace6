"""Federated search: several collections at once, concurrently, merged into one ranking.

Merges (`federation.merge` in the tenant file):
- ``signals`` (default): each signal (dense, BM25) is merged across collections by raw score,
  then fused once. Dense scores share one embedder and BM25 scores one analyser, so this ranks
  like a single collection holding every document (measured in docs/benchmarks.md). When the
  collections differ in mode, fusion, alpha or grouping, the signals are put on one scale
  (min-max over each merged list: rank- and distribution-based normalisations decay at
  different rates, so mixing them would favour one collection's tail) and each hit is weighted
  by its own collection's alpha (equal weights without one), the weights summing to 1 per
  collection: a BM25-only collection's best hit and a hybrid one's both score 1 (calibrated,
  not refused).
- ``rrf`` and ``dbsf``: each collection's final list is one input to the fusion. They treat each
  collection's best hit as equally good, which suits unrelated collections and collapses on
  shards of one corpus.

`federation.weights` weighs collections in any merge: under ``rrf``/``dbsf`` a collection's weight
is its list's fusion weight; under ``signals`` each of its hits' merged score is multiplied by it
(every signal list a hit is in is its own collection's, so both scale the hit's whole contribution).

Each collection runs with its own defaults and a timeout; one that fails or is slow is left
out and reported, and only when every collection fails is the search an error.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.admission.scheduler import fan_out
from gateway.errors import ErrorCode, GatewayError, StorageUnavailable
from gateway.retrieval.fusion import alpha_weights, chunk_key, fuse, scaled, source_key, weighted
from gateway.retrieval.hit import Hit, SignalScore, normalised_score
from gateway.retrieval.options import Fusion, Mode, Query, SearchOptions
from gateway.retrieval.retrievers import combine
from gateway.tenancy.registry import CollectionRef


# Failures of the service, not of the request: retrying may help.
_SERVER_SIDE = frozenset({ErrorCode.STORAGE_UNAVAILABLE, ErrorCode.UPSTREAM_UNAVAILABLE, ErrorCode.INTERNAL})


class CollectionSearch(Protocol):
    """One collection's retrieval as federation uses it (CollectionRetriever, CustomRetriever)."""

    @property
    def ref(self) -> CollectionRef: ...

    async def signal_lists(self, query: Query, options: SearchOptions) -> dict[str, list[Hit]]: ...

    def effective_mode(self, query: Query, options: SearchOptions) -> Mode: ...

    def notices(self, query: Query, options: SearchOptions) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class Member:
    retriever: CollectionSearch
    options: SearchOptions

    @property
    def label(self) -> str:
        return self.retriever.ref.label


@dataclass(frozen=True, slots=True)
class CollectionFailure:
    collection: str
    reason: str
    code: str


@dataclass(frozen=True, slots=True)
class FederatedOutcome:
    hits: list[Hit]
    failures: tuple[CollectionFailure, ...]
    counts: dict[str, int]


class FederatedRetriever:
    def __init__(self, members: Sequence[Member], merge: str = "signals", timeout_s: float = 5.0,
                 rrf_k: int = 60, candidates: int | None = None,
                 weights: Mapping[tuple[str, str], float] | None = None) -> None:
        if not members:
            raise ValueError("federated search needs at least one collection")
        self._members = list(members)
        self._merge = merge
        self._timeout = timeout_s
        self._rrf_k = rrf_k
        # None: normalise over everything the collections returned. N shards of one corpus that
        # each return c candidates then give N * c, the depth one collection of c * N would use.
        self._candidates = candidates
        # (namespace, collection) -> weight in the merge; a collection not named weighs 1.
        self._weights = dict(weights or {})

    async def retrieve(self, query: Query, limit: int) -> FederatedOutcome:
        """The merged hits. A collection whose caller reads stored fields searches identities only,
        and only the hits the merge returns get their fields, one lookup per collection."""
        results = await fan_out(*(self._one(m, query) for m in self._members), return_exceptions=True)
        failures: list[CollectionFailure] = []
        succeeded: list[tuple[Member, dict[str, list[Hit]]]] = []
        for member, result in zip(self._members, results):
            if isinstance(result, BaseException):
                failures.append(_failure(member.label, result, self._timeout))
            else:
                succeeded.append((member, result))
        if not succeeded:
            raise _every_failure(results, failures)
        counts = {m.label: sum(len(v) for v in lists.values()) for m, lists in succeeded}
        if self._merge == "signals":
            if any(w != 1.0 for w in self._weights.values()):
                # Every candidate is ranked, then weighed, then cut: a weight may lift a hit into the limit.
                everything = sum(len(hits) for _, lists in succeeded for hits in lists.values())
                hits = scaled(self._merge_signals(succeeded, everything), self.weight, limit)
            else:
                hits = self._merge_signals(succeeded, limit)
        else:
            method = Fusion.DBSF if self._merge == "dbsf" else Fusion.RRF
            ranked = [_with_collection_rank(m.label, combine(lists, m.options)) for m, lists in succeeded]
            weights = [self._weights.get(_where(m), 1.0) for m, _ in succeeded]
            hits = fuse(method, ranked, weights=weights, k=self._rrf_k, limit=limit)
        hits = await self._filled(hits, [member for member, _ in succeeded])
        return FederatedOutcome(hits=[_federated(h) for h in hits], failures=tuple(failures), counts=counts)

    def weight_of(self, member: Member) -> float:
        """The weight of a member collection in the merge (1 when not named)."""
        return self._weights.get(_where(member), 1.0)

    def weight(self, hit: Hit) -> float:
        """The weight of the hit's collection in the merge (1 when not named)."""
        return self._weights.get((hit.namespace, hit.collection), 1.0)

    async def _one(self, member: Member, query: Query) -> dict[str, list[Hit]]:
        options = member.options
        if _fills(member):
            options = dataclasses.replace(options, fields=frozenset())
        return await asyncio.wait_for(member.retriever.signal_lists(query, options), self._timeout)

    async def _filled(self, hits: list[Hit], members: list[Member]) -> list[Hit]:
        """The merged hits, those of collections that searched identities only filled with their
        stored fields, in order; a hit whose row was deleted since its search is left out."""
        filling = {(m.retriever.ref.scope.namespace, m.retriever.ref.scope.collection): m
                   for m in members if _fills(m)}
        if not filling:
            return hits
        mine = {where: [h for h in hits if (h.namespace, h.collection) == where] for where in filling}
        done = await asyncio.gather(*(filling[where].retriever.fill(found, filling[where].options.fields)  # type: ignore[attr-defined]
                                      for where, found in mine.items()))
        filled = {hit.key: hit for each in done for hit in each}
        kept = []
        for hit in hits:
            if (hit.namespace, hit.collection) not in filling:
                kept.append(hit)  # a custom retriever's hit: its fields came with it
            elif hit.key in filled:
                kept.append(filled[hit.key])
        return kept

    def _merge_signals(self, succeeded: list[tuple[Member, dict[str, list[Hit]]]], limit: int) -> list[Hit]:
        merged: dict[str, list[Hit]] = {}
        for _, lists in succeeded:
            for signal, hits in lists.items():
                merged.setdefault(signal, []).extend(hits)
        for signal, hits in merged.items():
            hits.sort(key=lambda h: (-h.score, h.qualified_id))
            kept = hits if self._candidates is None else hits[:self._candidates]
            best = kept[0].score if kept else 0.0
            merged[signal] = [_rerank(h, signal, rank, best) for rank, h in enumerate(kept, start=1)]
        shapes = {_shape(m.options) for m, _ in succeeded}
        # Any other signal (a memory collection's `memory`, a custom retriever's `custom:<c>`) is on
        # its own scale: never merged raw, always calibrated.
        if len(shapes) == 1 and set(merged) <= {"dense", "sparse"}:
            options = dataclasses.replace(succeeded[0][0].options, limit=limit)
            return combine(merged, options)
        return calibrated(merged, {(m.retriever.ref.scope.namespace, m.retriever.ref.scope.collection): m.options
                                   for m, _ in succeeded}, limit)


def _where(member: Member) -> tuple[str, str]:
    scope = member.retriever.ref.scope
    return (scope.namespace, scope.collection)


def _fills(member: Member) -> bool:
    """Whether the member's collection searches identities only and fills the hits returned: one that
    can (a Milvus collection, not a custom retriever), when the caller reads stored fields."""
    fills = getattr(member.retriever, "fills", None)
    return fills is not None and fills(member.options)


def _shape(options: SearchOptions) -> tuple[object, ...]:
    return (options.mode, options.fusion, options.alpha, options.group_by_source, options.rrf_k)


def calibrated(merged: dict[str, list[Hit]], settings: dict[tuple[str, str], SearchOptions],
               limit: int) -> list[Hit]:
    """Fuse signal lists merged across collections whose settings differ: every signal is min-max
    normalised over its whole merged list, and each hit's signals are weighted by its own
    collection's alpha, with the weights summing to 1 per collection.

    `settings` maps (namespace, collection) to that collection's options.
    """
    values = {signal: {h.key: h.score for h in weighted([hits])} for signal, hits in merged.items()}
    totals: dict[Hashable, float] = {}
    first: dict[Hashable, Hit] = {}
    signals: dict[Hashable, list[SignalScore]] = {}
    for signal, hits in merged.items():
        seen: set[Hashable] = set()
        for hit in hits:
            options = settings[(hit.namespace, hit.collection)]
            key = (source_key if options.group_by_source else chunk_key)(hit)
            if key in seen:
                continue
            seen.add(key)
            totals[key] = totals.get(key, 0.0) + _weight(signal, options) * values[signal][hit.key]
            first.setdefault(key, hit)
            known = signals.setdefault(key, [])
            known.extend(s for s in hit.provenance.scores if s not in known)
    ranked = sorted(totals, key=lambda key: (-totals[key], first[key].qualified_id))[:limit]
    out = []
    for key in ranked:
        hit = first[key]
        provenance = dataclasses.replace(hit.provenance, scores=tuple(signals[key]), fused_score=totals[key])
        out.append(dataclasses.replace(hit, score=totals[key], provenance=provenance))
    return out


def _weight(signal: str, options: SearchOptions) -> float:
    """The collection's weight on `signal`, out of 1 over the signals its mode searches."""
    if options.mode is not Mode.HYBRID or signal not in ("dense", "sparse"):
        return 1.0  # one signal (a custom retriever's own, a memory collection's `memory`) weighs 1
    dense, sparse = alpha_weights(options.alpha) or (1.0, 1.0)
    total = dense + sparse
    return (dense if signal == "dense" else sparse) / total


def _every_failure(results: Sequence[object], failures: Sequence[CollectionFailure]) -> GatewayError:
    """The error for a search in which no collection answered.

    When every collection refused the request itself (a filter on a field none declares, a mode
    none supports), that is the client's mistake and keeps its code; otherwise storage failed.
    """
    reasons = "; ".join(f"{f.collection}: {f.reason}" for f in failures)
    refusals = [r for r in results if isinstance(r, GatewayError) and r.code not in _SERVER_SIDE]
    if len(refusals) == len(results):
        first = refusals[0]
        if len(results) == 1:
            return first
        return type(first)(f"no collection of this search accepts the request: {reasons}")
    return StorageUnavailable(f"every collection of the federated search failed: {reasons}")


def _failure(label: str, error: BaseException, timeout_s: float) -> CollectionFailure:
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return CollectionFailure(label, f"timed out after {timeout_s:g} s", "TIMEOUT")
    if isinstance(error, GatewayError):
        return CollectionFailure(label, error.message, error.code.value)
    return CollectionFailure(label, f"backend error ({type(error).__name__})", "STORAGE_UNAVAILABLE")


def _with_collection_rank(label: str, hits: list[Hit]) -> list[Hit]:
    """Record each hit's rank within its collection as a signal of its own."""
    out = []
    for rank, hit in enumerate(hits, start=1):
        scores = hit.provenance.scores + (SignalScore(f"collection:{label}", hit.score, rank),)
        out.append(dataclasses.replace(hit, provenance=dataclasses.replace(hit.provenance, scores=scores)))
    return out


def _rerank(hit: Hit, signal: str, rank: int, best: float) -> Hit:
    """A hit's rank in the merged signal list replaces its rank within its own collection, and its normalised
    score is against the merged list's best (BM25 shares one scale across collections)."""
    scores = tuple(SignalScore(s.signal, s.raw, rank, normalised_score(s.signal, s.raw, best))
                   if s.signal == signal else s for s in hit.provenance.scores)
    scores += (SignalScore(f"collection:{hit.namespace}/{hit.collection}", hit.score, _own_rank(hit, signal)),)
    return dataclasses.replace(hit, provenance=dataclasses.replace(hit.provenance, scores=scores))


def _own_rank(hit: Hit, signal: str) -> int:
    return next(s.rank for s in hit.provenance.scores if s.signal == signal)


def _federated(hit: Hit) -> Hit:
    return dataclasses.replace(hit, provenance=dataclasses.replace(hit.provenance, retriever="federated"))
