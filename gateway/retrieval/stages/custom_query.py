"""customQuery: a tenant's own query stage, `module:function(question, queries, params) -> queries`.

It runs before retrieval, like queryPlanner, multiQuery and hyde, and may rewrite the planned
queries: their text, weights, modes and filters, or add and remove queries. It is held to limits
checked on every call; a result outside them is an INVALID_INPUT error (or a recorded skip with
`on_error: skip`):

- a non-empty list of `PlannedQuery`, at most `maxQueries`;
- every text non-empty and at most GATEWAY_MAX_QUERY_CHARS characters;
- every weight a finite number above 0 and at most 10, every mode None or a `Mode`;
- every filter only on fields that every target collection declares, and ANDed with the request's
  own filter when the search runs: a stage can narrow what the caller asked for, never widen it,
  and the tenant boundary is added in storage whatever the filter says.

A query it returns with kind `original` whose text differs from the question becomes kind
`rewrite` (the client's own query vector is used for the question's own text only).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from typing import Any

from gateway.admission.scheduler import offload
from gateway.entry_points import CUSTOM_QUERY_STAGE, load_entry_point
from gateway.errors import InvalidInput
from gateway.retrieval.options import Mode
from gateway.retrieval.pipeline import PlannedQuery, StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import CustomQueryParams, OnError

# A planned query's weight scales its RRF contribution (pipeline.merge_queries); 10 lets one query
# dominate the fan-out without making the others irrelevant by orders of magnitude.
MAX_WEIGHT = 10.0


class CustomQuery:
    def __init__(self, params: CustomQueryParams, where: str) -> None:
        self.on_error: OnError = params.on_error
        self.name = f"customQuery:{params.function}"
        self._params = params
        _, sample, shape = CUSTOM_QUERY_STAGE
        self._function = load_entry_point(params.function, where, sample, shape)

    async def plan(self, request: StageRequest, queries: list[PlannedQuery],
                   handle: StageHandle) -> list[PlannedQuery]:
        given = list(queries)
        if inspect.iscoroutinefunction(self._function):
            result: Any = await self._function(request.question, given, dict(self._params.params))
        else:
            result = await offload(self._function, request.question, given, dict(self._params.params))
        planned = self._checked(request, result)
        handle.detail.update({"function": self._params.function, "queries": len(planned),
                              "filtered": sum(1 for q in planned if q.filter is not None)})
        return planned

    def _checked(self, request: StageRequest, result: Any) -> list[PlannedQuery]:
        spec, limit = self._params.function, self._params.max_queries
        if not isinstance(result, list) or not all(isinstance(q, PlannedQuery) for q in result):
            raise InvalidInput(f"custom query stage {spec!r} must return a list of PlannedQuery, "
                               f"got {type(result).__name__}")
        if not 1 <= len(result) <= limit:
            raise InvalidInput(f"custom query stage {spec!r} returned {len(result)} queries; allowed: 1 to "
                               f"{limit} (maxQueries)")
        out = []
        for index, query in enumerate(result):
            text = query.text.strip() if isinstance(query.text, str) else ""
            if not text:
                raise InvalidInput(f"custom query stage {spec!r}: query {index} has no text; allowed: non-empty text")
            if len(text) > request.max_query_chars:
                raise InvalidInput(f"custom query stage {spec!r}: query {index} is {len(text)} characters; at most "
                                   f"{request.max_query_chars} are allowed")
            weight = query.weight
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                    or not 0 < weight <= MAX_WEIGHT:
                raise InvalidInput(f"custom query stage {spec!r}: query {index} has weight {weight!r}; allowed: a "
                                   f"number above 0 and at most {MAX_WEIGHT:g}")
            if query.mode is not None and not isinstance(query.mode, Mode):
                raise InvalidInput(f"custom query stage {spec!r}: query {index} has mode {query.mode!r}; allowed: "
                                   f"None or a Mode ({', '.join(m.name for m in Mode)})")
            if query.filter is not None:
                request.check_filter(query.filter)
            kind = "rewrite" if query.kind == "original" and text != request.question else query.kind
            out.append(replace(query, text=text, kind=kind, weight=float(weight)))
        return out
