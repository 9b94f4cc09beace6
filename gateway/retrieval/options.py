"""Closed sets and the per-request retrieval options."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.storage.filters import FilterNode


class Mode(StrEnum):
    DENSE = "dense"
    SPARSE = "sparse"
    HYBRID = "hybrid"


class Fusion(StrEnum):
    RRF = "rrf"
    DBSF = "dbsf"
    WEIGHTED = "weighted"


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """What one retrieval over one collection should do; validated before it gets here."""

    mode: Mode
    limit: int
    fusion: Fusion = Fusion.RRF
    # Weaviate's convention: 1.0 = dense only, 0.0 = BM25 only. Used by `weighted` and as
    # per-list weights (alpha, 1 - alpha) by `rrf`/`dbsf` when set.
    alpha: float | None = None
    rrf_k: int = 60
    candidates: int = 50
    threshold: float | None = None
    filter: FilterNode | None = None
    # One hit per source (its best chunk), applied to each signal before fusion.
    group_by_source: bool = False
    # Stored chunk fields to fetch besides a hit's identity (storage names: text, title, metadata,
    # ...); None fetches all. Narrowed only when nothing after retrieval reads the rest.
    fields: frozenset[str] | None = None


def ignored_parameters(mode: Mode, fusion: Fusion | None, alpha: float | None) -> tuple[str, ...]:
    """Notices for request parameters that mean nothing in `mode`: fusion and alpha weigh two
    signals against each other, and a dense- or sparse-only search has one."""
    if mode is Mode.HYBRID:
        return ()
    given = [f"fusion {fusion.value!r}" if fusion is not None else "", f"alpha {alpha:g}" if alpha is not None else ""]
    return tuple(f"{g} ignored: it applies to mode 'hybrid' only, and this search ran mode {mode.value!r}"
                 for g in given if g)


@dataclass(frozen=True, slots=True)
class Query:
    """A query as retrievers see it. `text` is what BM25 and the embedder read; `vector`, when
    set, is its embedding, computed once for every collection a federated search visits.
    `image`, when set, is a decoded query image: the query is then that image, and `text` only
    labels it in the trace (docs/multimodal.md)."""

    text: str
    vector: Any = None
    image: Any = None
