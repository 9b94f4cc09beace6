"""Per-request options: a collection's configured defaults, overridden by what the caller set."""

from __future__ import annotations

from gateway.errors import LimitExceeded
from gateway.retrieval.options import Fusion, Mode, SearchOptions
from gateway.storage.filters import FilterNode
from gateway.tenancy.config import CollectionConfig


def options_for(config: CollectionConfig, *, mode: Mode | None = None, limit: int | None = None,
                fusion: Fusion | None = None, alpha: float | None = None,
                threshold: float | None = None, filter: FilterNode | None = None,
                candidates: int | None = None, group_by_source: bool | None = None,
                max_limit: int | None = None) -> SearchOptions:
    chosen_limit = limit if limit is not None else config.limit
    if chosen_limit < 1:
        raise LimitExceeded(f"limit {chosen_limit} is below 1; allowed: 1 to {max_limit or 'any'}")
    if max_limit is not None and chosen_limit > max_limit:
        raise LimitExceeded(f"limit {chosen_limit} is above the maximum {max_limit}; allowed: 1 to {max_limit}")
    if alpha is not None and not 0.0 <= alpha <= 1.0:
        raise LimitExceeded(f"alpha {alpha} is outside [0, 1]; 1 = dense only, 0 = BM25 only")
    return SearchOptions(
        mode=mode or config.mode,
        limit=chosen_limit,
        fusion=fusion or config.fusion,
        alpha=alpha if alpha is not None else config.alpha,
        rrf_k=config.rrf_k,
        candidates=max(candidates or config.candidates, chosen_limit),
        threshold=threshold if threshold is not None else config.threshold,
        filter=filter,
        group_by_source=config.group_by_source if group_by_source is None else group_by_source,
    )
