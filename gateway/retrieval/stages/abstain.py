"""abstain: no hits at all when the best one scores under a threshold ("no good evidence")."""

from __future__ import annotations

from gateway.retrieval.hit import Hit
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import AbstainParams, OnError


class Abstain:
    """Compares the first hit's score (lists are sorted by score) with the threshold.

    Place it after a reranker whose scale is known: late-interaction scores are mean cosines in
    [-1, 1], while fused hybrid scores depend on the fusion.
    """

    name = "abstain"
    depth = 0

    def __init__(self, params: AbstainParams) -> None:
        self.on_error: OnError = params.on_error
        self._threshold = params.threshold

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        best = hits[0].score if hits else None
        handle.detail.update({"threshold": self._threshold, "best_score": best})
        if best is None or best < self._threshold:
            reason = ("no hits to judge" if best is None
                      else f"best score {best:.4f} is under the threshold {self._threshold:g}")
            handle.detail["abstained"] = True
            handle.warn(f"abstained: {reason}; no evidence returned")
            return []
        handle.detail["abstained"] = False
        return hits
