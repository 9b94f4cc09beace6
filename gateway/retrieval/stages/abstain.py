"""abstain: no hits at all when the best one scores under a threshold ("no good evidence")."""

from __future__ import annotations

from gateway.retrieval.hit import Hit
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import AbstainParams, OnError


class Abstain:
    """Compares the best score with the threshold.

    Judge on a score whose scale is known: `signal: rerank:lateInteraction` reads the MaxSim
    score (a mean cosine in [-1, 1]) even when the reranker's blend made hit scores relative.
    """

    name = "abstain"
    depth = 0

    def __init__(self, params: AbstainParams) -> None:
        self.on_error: OnError = params.on_error
        self._threshold = params.threshold
        self._signal = params.signal

    def _best(self, hits: list[Hit]) -> float | None:
        if self._signal is None:
            return hits[0].score if hits else None
        raws = [s.raw for h in hits for s in h.provenance.scores if s.signal == self._signal]
        return max(raws) if raws else None

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        best = self._best(hits)
        label = f"{self._signal} score" if self._signal else "score"
        handle.detail.update({"threshold": self._threshold, "best_score": best, "signal": self._signal})
        if best is None or best < self._threshold:
            reason = ("no hits to judge" if not hits
                      else f"no hit has a {label}" if best is None
                      else f"best {label} {best:.4f} is under the threshold {self._threshold:g}")
            handle.detail["abstained"] = True
            handle.warn(f"abstained: {reason}; no evidence returned")
            return []
        handle.detail["abstained"] = False
        return hits
