"""custom: a tenant's own hit stage, `module:function(query, hits, params) -> hits`, traced like the rest.

The function may be sync or async. It may drop, reorder and re-score hits or change their
content, but not add hits it was not given: a returned hit whose (namespace, source, chunk)
is not among its input is an error, so a custom stage cannot bring in another tenant's data.
"""

from __future__ import annotations

import inspect
from typing import Any

from gateway.admission.scheduler import offload
from gateway.entry_points import load_entry_point
from gateway.errors import InvalidInput
from gateway.retrieval.hit import Hit, with_signal
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import CustomParams, OnError


class Custom:
    depth = 0

    def __init__(self, params: CustomParams, where: str) -> None:
        self.on_error: OnError = params.on_error
        self.name = f"custom:{params.function}"
        self._params = params
        self._function = load_entry_point(params.function, where, ("query", [], {}), "(query, hits, params)")

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        if inspect.iscoroutinefunction(self._function):
            result: Any = await self._function(request.question, list(hits), dict(self._params.params))
        else:
            result = await offload(self._function, request.question, list(hits), dict(self._params.params))
        if not isinstance(result, list) or not all(isinstance(h, Hit) for h in result):
            raise InvalidInput(f"custom stage {self._params.function!r} must return a list of Hit, "
                               f"got {type(result).__name__}")
        given = {h.key for h in hits}
        foreign = [h.id for h in result if h.key not in given]
        if foreign:
            raise InvalidInput(f"custom stage {self._params.function!r} returned hits it was not given: "
                               f"{', '.join(foreign[:3])}; a stage may only drop, reorder or re-score")
        handle.detail["function"] = self._params.function
        return _named(self.name, hits, result, handle)


def _named(name: str, given: list[Hit], result: list[Hit], handle: StageHandle) -> list[Hit]:
    """The stage's changes made visible: a re-scored hit gains a `custom:<function>` signal, and
    the trace counts (and names up to 5 of) the hits it dropped."""
    before = {h.key: h.score for h in given}
    out = [with_signal(h, name, h.score, rank) if h.score != before[h.key] else h
           for rank, h in enumerate(result, start=1)]
    kept = {h.key for h in result}
    dropped = [h.id for h in given if h.key not in kept]
    handle.detail.update({"rescored": sum(1 for a, b in zip(out, result) if a is not b), "dropped": len(dropped)})
    if dropped:
        handle.warn(f"{name} dropped {len(dropped)} hit(s): {', '.join(dropped[:5])}")
    return out
