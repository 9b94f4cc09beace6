"""decay: exponential half-life on a timestamp field, `score * 0.5 ** (age / half-life)`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from gateway.errors import InvalidInput
from gateway.retrieval.hit import Hit, with_signal
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.stages.fields import as_datetime, field_value
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import DecayParams, OnError

DAY_SECONDS = 86_400.0


def decayed(hits: Sequence[Hit], field: str, half_life_days: float, now: datetime,
            missing: str = "ignore", missing_factor: float = 0.5) -> tuple[list[Hit], list[str]]:
    """New hits re-sorted by decayed score, each with a `decay` signal (the factor applied), and
    the ids of hits without a usable timestamp.

    Future timestamps count as age 0. Decay multiplies, so it assumes non-negative scores
    (every fusion and the late-interaction reranker give those for relevant hits).
    """
    scored, absent = [], []
    for hit in hits:
        stamp = as_datetime(field_value(hit, field))
        if stamp is None:
            absent.append(hit.id)
            if missing == "error":
                raise InvalidInput(f"decay: hit {hit.id!r} has no timestamp in {field!r} "
                                   f"(missing: error; allowed: ignore, penalize, error)")
            factor = missing_factor if missing == "penalize" else 1.0
        else:
            age_days = max((now - stamp).total_seconds(), 0.0) / DAY_SECONDS
            factor = 0.5 ** (age_days / half_life_days)
        scored.append((hit.score * factor, factor, hit))
    scored.sort(key=lambda item: (-item[0], item[2].id))
    # Each hit names the factor its score was multiplied by: a `decay` signal, ranked after decay.
    return [with_signal(hit, "decay", factor, rank, score=score)
            for rank, (score, factor, hit) in enumerate(scored, start=1)], absent


class Decay:
    name = "decay"
    depth = 0

    def __init__(self, params: DecayParams, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.on_error: OnError = params.on_error
        self._params = params
        self._clock = clock

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        p = self._params
        out, absent = decayed(hits, p.field, p.half_life_days, self._clock(), p.missing, p.missing_factor)
        handle.detail.update({"field": p.field, "half_life_days": p.half_life_days, "missing": len(absent)})
        if absent and p.missing != "ignore":
            handle.warn(f"{len(absent)} hit(s) without a timestamp in {p.field!r} were penalised "
                        f"(x{p.missing_factor:g})")
        elif absent:
            handle.warn(f"{len(absent)} hit(s) without a timestamp in {p.field!r} kept their score")
        return out
