"""Early exit for a reranker: whether a query's incoming top is settled enough to leave as it is.

A reranker with `skipIfConfident` re-scores only the queries whose incoming order is uncertain.
Each condition reads only what the hits already carry: `signalsAgree` holds when dense and BM25
both rank the first hit first (its `dense` and `sparse` signals both have rank 1; a hit found by
one signal only, as in a dense or sparse search, never agrees), and `scoreGap` holds when the
first hit's incoming score is at least that much above the second's. The order is settled when
any set condition holds. benchmarks/quality/loco.py `gate` replays this function over judged
collections to choose a rule by leaving one collection out (docs/pipelines.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.retrieval.hit import Hit
from gateway.tenancy.pipelines import SkipIfConfidentParams


@dataclass(frozen=True, slots=True)
class Confidence:
    """Whether the reranker is skipped for this query, and why, as the trace reports it."""

    settled: bool
    reason: str


def confidence(hits: Sequence[Hit], rule: SkipIfConfidentParams) -> Confidence:
    """The rule's verdict on the incoming hits (best first)."""
    if not hits:
        return Confidence(True, "no hits")
    reasons = []
    if rule.signals_agree:
        ranks = {s.signal: s.rank for s in hits[0].provenance.scores}
        dense, sparse = ranks.get("dense"), ranks.get("sparse")
        if dense == 1 and sparse == 1:
            return Confidence(True, "dense and BM25 both rank the first hit first")
        reasons.append(f"the first hit is dense rank {dense or '-'}, BM25 rank {sparse or '-'}")
    if rule.score_gap is not None:
        gap = hits[0].score - hits[1].score if len(hits) > 1 else float("inf")
        if gap >= rule.score_gap:
            return Confidence(True, f"score gap between hits 1 and 2 is {gap:.4f} >= {rule.score_gap}")
        reasons.append(f"score gap between hits 1 and 2 is {gap:.4f} < {rule.score_gap}")
    return Confidence(False, "; ".join(reasons))
