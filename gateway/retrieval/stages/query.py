"""Query stages: a language model plans sub-queries, rephrases, or writes a hypothetical answer.

Each asks the tenant's chat endpoint for one JSON object and validates it here; anything that
does not fit raises `UpstreamUnavailable`, and the stage's `on_error` decides what happens.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.errors import GatewayError, UpstreamUnavailable
from gateway.retrieval.llm import ChatClient
from gateway.retrieval.options import Mode
from gateway.retrieval.pipeline import PlannedQuery, StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.storage.filters import (
    FILTERABLE_FIELDS,
    METADATA_PREFIX,
    Op,
    filter_from_json,
)
from gateway.tenancy.pipelines import (
    HydeParams,
    MultiQueryParams,
    OnError,
    QueryPlannerParams,
)

_SPACE = re.compile(r"\s+")

MULTI_QUERY_PROMPT = (
    "You rewrite search queries for a document retrieval system. Given a question, write {count} "
    "alternative phrasings that keep its meaning but vary the wording (synonyms, expanded "
    "abbreviations, a more technical and a plainer variant). Answer with JSON only: "
    '{{"queries": ["...", "..."]}}')

HYDE_PROMPT = (
    "Write one short passage (at most {max_chars} characters) that answers the question the way a "
    "reference document or paper would, stating facts plainly. It is used only to find real "
    'documents, so be specific. Answer with JSON only: {{"passage": "..."}}')

PLANNER_PROMPT = (
    "You plan searches over a document collection. Split the question into at most {max_queries} "
    "self-contained sub-queries, one per piece of information needed. For each give: text; "
    'type, one of "semantic" (meaning), "keyword" (exact names, codes, identifiers) or "hybrid"; '
    "weight between 0 and 1 (importance); and, only when the question restricts it, a filter. "
    'A filter is {{"field": F, "op": O, "value": V}} or {{"and": [...]}}, {{"or": [...]}}, '
    '{{"not": {{...}}}}; F is one of: {fields}; O is one of: {ops}. Answer with JSON only: '
    '{{"queries": [{{"text": "...", "type": "hybrid", "weight": 1.0, "filter": null}}]}}')

QUERY_TYPES = {"semantic": Mode.DENSE, "keyword": Mode.SPARSE, "hybrid": Mode.HYBRID}


def normalised(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def _strings(data: dict[str, Any], key: str, model: str) -> list[str]:
    values = data.get(key)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise UpstreamUnavailable(f"language model {model!r} answered without a list of strings in {key!r}")
    return values


def _unique(queries: list[PlannedQuery], extra: list[PlannedQuery], max_chars: int) -> list[PlannedQuery]:
    seen = {normalised(q.text) for q in queries}
    out = list(queries)
    for query in extra:
        text = query.text.strip()[:max_chars]
        key = normalised(text)
        if key and key not in seen:
            seen.add(key)
            out.append(PlannedQuery(text, query.kind, query.weight, query.filter, query.mode))
    return out


class MultiQuery:
    name = "multiQuery"

    def __init__(self, params: MultiQueryParams, llm: ChatClient) -> None:
        self.on_error: OnError = params.on_error
        self._params = params
        self._llm = llm

    async def plan(self, request: StageRequest, queries: list[PlannedQuery],
                   handle: StageHandle) -> list[PlannedQuery]:
        data = await self._llm.complete_json(MULTI_QUERY_PROMPT.format(count=self._params.count), request.question)
        phrasings = _strings(data, "queries", self._llm.model)[:self._params.count]
        kept = queries if self._params.keep_original else [q for q in queries if q.kind != "original"]
        out = _unique(kept, [PlannedQuery(p, "paraphrase") for p in phrasings], request.max_query_chars)
        handle.detail["duplicates_dropped"] = len(kept) + len(phrasings) - len(out)
        return out if out else queries


class Hyde:
    name = "hyde"

    def __init__(self, params: HydeParams, llm: ChatClient) -> None:
        self.on_error: OnError = params.on_error
        self._params = params
        self._llm = llm

    async def plan(self, request: StageRequest, queries: list[PlannedQuery],
                   handle: StageHandle) -> list[PlannedQuery]:
        data = await self._llm.complete_json(HYDE_PROMPT.format(max_chars=self._params.max_chars), request.question)
        passage = data.get("passage")
        if not isinstance(passage, str) or not passage.strip():
            raise UpstreamUnavailable(f"language model {self._llm.model!r} answered without a 'passage' string")
        passage = passage.strip()[:min(self._params.max_chars, request.max_query_chars)]
        hyde = PlannedQuery(passage, "hyde")
        handle.detail["mode"] = self._params.mode
        if self._params.mode == "replace":
            return [hyde if q.kind == "original" else q for q in queries]
        return [*queries, hyde]


class QueryPlanner:
    name = "queryPlanner"

    def __init__(self, params: QueryPlannerParams, llm: ChatClient) -> None:
        self.on_error: OnError = params.on_error
        self._params = params
        self._llm = llm

    async def plan(self, request: StageRequest, queries: list[PlannedQuery],
                   handle: StageHandle) -> list[PlannedQuery]:
        fields = sorted(FILTERABLE_FIELDS) + [METADATA_PREFIX + k for k in sorted(request.metadata_fields)]
        prompt = PLANNER_PROMPT.format(max_queries=self._params.max_queries, fields=", ".join(fields),
                                       ops=", ".join(o.value for o in Op))
        data = await self._llm.complete_json(prompt, request.question)
        items = data.get("queries")
        if not isinstance(items, list) or not items:
            raise UpstreamUnavailable(f"language model {self._llm.model!r} answered without a 'queries' list")
        planned: list[PlannedQuery] = []
        for index, item in enumerate(items[:self._params.max_queries]):
            query = self._sub_query(request, index, item, handle)
            if query is not None:
                planned.append(query)
        kept = queries if self._params.keep_original else [q for q in queries if q.kind != "original"]
        out = _unique(kept, planned, request.max_query_chars)
        return out if out else queries

    def _sub_query(self, request: StageRequest, index: int, item: Any, handle: StageHandle) -> PlannedQuery | None:
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise UpstreamUnavailable(f"language model {self._llm.model!r}: queries[{index}] has no 'text' string")
        kind = item.get("type", "hybrid")
        if kind not in QUERY_TYPES:
            raise UpstreamUnavailable(f"language model {self._llm.model!r}: queries[{index}] has type {kind!r}; "
                                      f"allowed: {', '.join(QUERY_TYPES)}")
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1:
            raise UpstreamUnavailable(f"language model {self._llm.model!r}: queries[{index}] has weight "
                                      f"{weight!r}; allowed: a number in (0, 1]")
        node = None
        if item.get("filter") is not None:
            try:
                node = filter_from_json(item["filter"])
                request.check_filter(node)
            except GatewayError as exc:
                # A filter the collection cannot apply would change the question's meaning.
                handle.warn(f"sub-query {index + 1} dropped: its filter is not valid here ({exc.message})")
                return None
        return PlannedQuery(item["text"], "planner", float(weight), node, QUERY_TYPES[kind])
