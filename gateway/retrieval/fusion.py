"""Rank and score fusion: pure functions over ranked lists.

`fuse_scores` works on (identity, score) pairs alone, so a caller can fuse candidates and build
hits only for what it returns; `rrf`, `dbsf`, `weighted` and `fuse` do the same over hit lists and
return rescored hits.

Formulas (each list is ranked best first; rank is 1-based; a hit absent from a list adds 0):

- ``rrf``:      sum_i w_i / (k + rank_i), k = 60 (Cormack, Clarke & Buettcher, SIGIR 2009).
- ``dbsf``:     per list, (s - (mu - 3 sigma)) / (6 sigma) with the population sigma of that
                list's scores, clipped to [0, 1], then summed with weights (Milvus/Qdrant DBSF).
- ``weighted``: per list, min-max normalisation to [0, 1], then the weighted sum (Weaviate's
                relativeScoreFusion; with two lists, weights (alpha, 1 - alpha)).

``round_robin`` (a rerank chain's `merge: roundRobin`) interleaves lists instead of scoring them.
``scaled`` multiplies each fused score by a per-hit factor (a federated collection's weight) and ranks again.

Ties are broken by the fused score, then by the hit id, so the output is deterministic.
Hits are identified by (namespace, collection, source_id, chunk_id), or by `key` when the caller groups
differently (one hit per source); the fused hit keeps the fields of its first appearance and
the union of every list's signal scores.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Hashable, Sequence

from gateway.retrieval.hit import Hit, SignalScore
from gateway.retrieval.options import Fusion

RRF_K = 60

HitList = Sequence[Hit]
KeyFn = Callable[[Hit], Hashable]
# One list's entries: an identity and that list's score for it (higher is better), best first.
ScoredList = Sequence[tuple[Hashable, float]]


def chunk_key(hit: Hit) -> Hashable:
    return hit.key


def source_key(hit: Hit) -> Hashable:
    return (hit.namespace, hit.collection, hit.source_id)


def rrf(lists: Sequence[HitList], weights: Sequence[float] | None = None, k: int = RRF_K,
        limit: int | None = None, key: KeyFn = chunk_key) -> list[Hit]:
    """Reciprocal rank fusion."""
    return _fuse(lists, weights, limit, _rrf_contribution(k), key)


def dbsf(lists: Sequence[HitList], weights: Sequence[float] | None = None,
         limit: int | None = None, key: KeyFn = chunk_key) -> list[Hit]:
    """Distribution-based score fusion (mean +- 3 sigma, population sigma, clipped)."""
    return _fuse(lists, weights, limit, _dbsf_normalise, key)


def weighted(lists: Sequence[HitList], weights: Sequence[float] | None = None,
             limit: int | None = None, key: KeyFn = chunk_key) -> list[Hit]:
    """Min-max normalised weighted sum."""
    return _fuse(lists, weights, limit, _minmax_normalise, key)


def fuse(method: Fusion, lists: Sequence[HitList], weights: Sequence[float] | None = None,
         limit: int | None = None, k: int = RRF_K, key: KeyFn = chunk_key) -> list[Hit]:
    """Dispatch on a `Fusion` value."""
    return _fuse(lists, weights, limit, _contribution(method, k), key)


def fuse_scores(method: Fusion, lists: Sequence[ScoredList], tie: Callable[[Hashable], str],
                weights: Sequence[float] | None = None, limit: int | None = None,
                k: int = RRF_K) -> list[tuple[Hashable, float]]:
    """The fused (identity, score) pairs, best first: the same formulas as `fuse` with nothing
    but identities and scores, so no hit is built for a candidate that is not returned.
    `tie(identity)` orders equal scores (the hit id), as `fuse` does."""
    return _totals(lists, weights, limit, _contribution(method, k), tie)


def _contribution(method: Fusion, k: int) -> Callable[[Sequence[float]], list[float]]:
    if method is Fusion.RRF:
        return _rrf_contribution(k)
    return _dbsf_normalise if method is Fusion.DBSF else _minmax_normalise


def _rrf_contribution(k: int) -> Callable[[Sequence[float]], list[float]]:
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    return lambda scores: [1.0 / (k + rank) for rank in range(1, len(scores) + 1)]


def round_robin(lists: Sequence[HitList], key_of: KeyFn = chunk_key) -> list[Hit]:
    """Interleave ranked lists: every list's 1st hit (in list order), then every 2nd, and so on.

    A hit already taken (same identity: namespace, collection, source, chunk) is skipped, and the
    one kept gains the other copies' signal scores. Each list gets an equal share of the top
    places whatever its score scale, so no list can crowd out the others. The merged score is
    1 / position (1, 0.5, 0.33, ...): higher is better, and the list stays sorted by score.
    """
    first: dict[Hashable, Hit] = {}
    signals: dict[Hashable, list[SignalScore]] = {}
    order: list[Hashable] = []
    for row in itertools.zip_longest(*lists):  # depth by depth; a shorter list yields None
        for hit in row:
            if hit is None:
                continue
            key = key_of(hit)
            if key not in first:
                first[key] = hit
                order.append(key)
            merged = signals.setdefault(key, [])
            merged.extend(s for s in hit.provenance.scores if s not in merged)
    return [_with_score(first[key], 1.0 / position, tuple(signals[key]))
            for position, key in enumerate(order, start=1)]


def scaled(hits: HitList, factor: Callable[[Hit], float], limit: int | None = None) -> list[Hit]:
    """Each hit's score (and fused score, when it has one) times `factor(hit)`, ranked again by score, equal
    scores by id; the first `limit`. A federated merge weighs collections this way: every list a hit is in
    belongs to its one collection, so scaling its total is scaling each of its contributions."""
    out = []
    for hit in hits:
        weight = factor(hit)
        if weight < 0:
            raise ValueError(f"a score factor must be >= 0, got {weight} for {hit.qualified_id}")
        fused = None if hit.provenance.fused_score is None else hit.provenance.fused_score * weight
        out.append(dataclasses.replace(hit, score=hit.score * weight,
                                       provenance=dataclasses.replace(hit.provenance, fused_score=fused)))
    out.sort(key=lambda h: (-h.score, h.id))
    return out[:limit]  # a limit of None slices nothing off


def best_per_source(hits: HitList) -> list[Hit]:
    """Keep each source's best-ranked chunk, in rank order."""
    seen: set[Hashable] = set()
    kept = []
    for hit in hits:
        group = source_key(hit)
        if group not in seen:
            seen.add(group)
            kept.append(hit)
    return kept


def alpha_weights(alpha: float | None) -> tuple[float, float] | None:
    """(dense, sparse) weights from Weaviate's alpha: 1 = dense only, 0 = BM25 only."""
    if alpha is None:
        return None
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be within [0, 1], got {alpha}")
    return (alpha, 1.0 - alpha)


def _dbsf_normalise(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    mean = sum(scores) / len(scores)
    sigma = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    if sigma == 0.0:
        # No spread: the list cannot tell its hits apart; all sit at the mean, i.e. mid-range.
        return [0.5] * len(scores)
    low = mean - 3 * sigma
    return [min(1.0, max(0.0, (s - low) / (6 * sigma))) for s in scores]


def _minmax_normalise(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == low:
        # One hit, or all equal: each is the best of its list.
        return [1.0] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def _fuse(lists: Sequence[HitList], weights: Sequence[float] | None, limit: int | None,
          contribution: Callable[[Sequence[float]], list[float]], key_of: KeyFn) -> list[Hit]:
    first: dict[Hashable, Hit] = {}
    signals: dict[Hashable, list[SignalScore]] = {}
    scored: list[list[tuple[Hashable, float]]] = []
    for hits in lists:
        entries = []
        seen: set[Hashable] = set()
        for hit in hits:
            key = key_of(hit)
            entries.append((key, hit.score))
            if key in seen:  # counted once per list, at its best rank (see `_totals`)
                continue
            seen.add(key)
            first.setdefault(key, hit)
            merged = signals.setdefault(key, [])
            merged.extend(s for s in hit.provenance.scores if s not in merged)
        scored.append(entries)
    ranked = _totals(scored, weights, limit, contribution, lambda key: first[key].id)
    return [_with_score(first[key], total, tuple(signals[key])) for key, total in ranked]


def _totals(lists: Sequence[ScoredList], weights: Sequence[float] | None, limit: int | None,
            contribution: Callable[[Sequence[float]], list[float]],
            tie: Callable[[Hashable], str]) -> list[tuple[Hashable, float]]:
    if weights is None:
        weights = [1.0] * len(lists)
    if len(weights) != len(lists):
        raise ValueError(f"{len(weights)} weights for {len(lists)} lists")
    totals: dict[Hashable, float] = {}
    for entries, weight in zip(lists, weights):
        seen: set[Hashable] = set()
        for (key, _), value in zip(entries, contribution([score for _, score in entries])):
            if key in seen:  # a list repeating a hit counts it once, at its best rank
                continue
            seen.add(key)
            totals[key] = totals.get(key, 0.0) + weight * value
    return [(key, totals[key]) for key in _best(totals, limit, tie)]


def _best(totals: dict[Hashable, float], limit: int | None, tie: Callable[[Hashable], str]) -> list[Hashable]:
    """The keys by total, highest first, equal totals by `tie`; the first `limit` of them. Only the
    keys that share a total are tied, so `tie` (a string built per key) is asked of those alone."""
    ranked: list[Hashable] = []
    for _, group in itertools.groupby(sorted(totals, key=totals.__getitem__, reverse=True), key=totals.__getitem__):
        keys = list(group)
        ranked.extend(sorted(keys, key=tie) if len(keys) > 1 else keys)
        if limit is not None and len(ranked) >= limit:
            return ranked[:limit]
    return ranked


def _with_score(hit: Hit, score: float, scores: tuple[SignalScore, ...]) -> Hit:
    provenance = dataclasses.replace(hit.provenance, scores=scores, fused_score=score)
    return dataclasses.replace(hit, score=score, provenance=provenance)
