"""The agent tools: definitions (JSON Schema) and calls, on the same searcher as GraphQL.

Query-only by design: there is no tool that writes or deletes. The same definitions are served
over MCP (`/mcp`) and as OpenAI-style function JSON (the `toolDefinitions` query). Arguments
are checked strictly here (unknown names, wrong types), whatever the client's schema checking.
The search tool's arguments are GraphQL's SearchInput fields, from the one list in
gateway/routing/parameters.py, and its enumerated values (mode, fusion, groupBy, a filter's op)
are listed in GraphQL's spelling (`HYBRID`, `GTE`), so a model's arguments can be sent as the
variables of a GraphQL search as they are. Calls here also take the lower-case values (`hybrid`,
`gte`), which earlier definitions listed.

A collection with `tool_prefix: docs` also gets its own pair, `docsSearch` and `docsGetSource`,
bound to that collection (a custom-retriever collection gets `docsSearch` only: its sources are
not in Milvus). Each tenant sees its own tools only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

from gateway.errors import InvalidInput, allowed
from gateway.grounding.citations import Evidence, format_marker, validate_citations
from gateway.grounding.context import marker, render_context
from gateway.grounding.support import check_support_bundled
from gateway.retrieval.facets import DEFAULT_BUCKETS, DateInterval, FacetCounts, FacetSpec
from gateway.retrieval.highlights import Highlights
from gateway.retrieval.hit import Hit
from gateway.retrieval.options import Fusion, Mode
from gateway.retrieval.shaping import GroupBy
from gateway.retrieval.sorting import SortKey, SortOrder
from gateway.routing.parameters import SEARCH_PARAMETERS, json_schema, search_request
from gateway.routing.searcher import Searcher
from gateway.storage.filters import Op, filter_from_json
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.derived import PerTenant
from gateway.tenancy.registry import CollectionRef, TenantRegistry
from gateway.values import check_json

_STRING = {"type": "string"}
# As for GraphQL variables: a filter nests at most 8 levels, two JSON levels each.
MAX_ARGUMENT_DEPTH = 32


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: str
    parameters: Mapping[str, Any]

    def openai(self) -> dict[str, Any]:
        """The OpenAI function-calling shape."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}


def definitions(max_limit: int) -> tuple[ToolDefinition, ...]:
    return (
        ToolDefinition("search", (
            "Find evidence for a question in this tenant's collections. Returns hits with sourceId, chunkId, "
            "score, content, url and a citation marker [sourceId/chunkId] to cite them with."),
            _search_parameters(max_limit, targets=True)),
        ToolDefinition("getSource", "Every chunk of one source, in order, to read around a citation.",
                       _object({"namespace": _STRING, "sourceId": _STRING, "collection": _STRING},
                               required=("namespace", "sourceId"))),
        ToolDefinition("validateCitations", (
            "Check an answer's citations against the evidence it was written from: each [sourceId/chunkId] "
            "marker is valid, unknown (not in the evidence) or misquoted (a quoted span before it is not in "
            "the chunk), and each valid one is supported, weak or unsupported by its chunk (a cross-encoder "
            "score; support=false skips it); with required=true, sentences that cite nothing are listed."),
            _object({"answer": _STRING,
                     "evidence": {"type": "array", "items": _object(
                         {"sourceId": _STRING, "chunkId": _STRING, "content": _STRING},
                         required=("sourceId", "chunkId", "content"))},
                     "required": {"type": "boolean"}, "support": {"type": "boolean"}},
                    required=("answer", "evidence"))),
    )


def collection_definitions(ref: CollectionRef, max_limit: int) -> tuple[ToolDefinition, ...]:
    """The `<prefix>Search` (and, for a Milvus collection, `<prefix>GetSource`) tools of one collection."""
    prefix, label = ref.config.tool_prefix, ref.label
    about = f" ({ref.config.description})" if ref.config.description else ""
    search = ToolDefinition(f"{prefix}Search", (
        f"Find evidence for a question in the collection {label}{about}. Returns hits with sourceId, chunkId, "
        "score, content, url and a citation marker [sourceId/chunkId] to cite them with."),
        _search_parameters(max_limit, targets=False))
    if ref.config.retriever is not None:
        return (search,)
    source = ToolDefinition(f"{prefix}GetSource", f"Every chunk of one source of {label}, in order, to read "
                                                   "around a citation.",
                            _object({"sourceId": _STRING}, required=("sourceId",)))
    return (search, source)


def _search_parameters(max_limit: int, *, targets: bool) -> dict[str, Any]:
    """The search tool's arguments: GraphQL's SearchInput fields (routing/parameters.py), less those
    that choose collections when the tool is bound to one. `query` stays required here: an agent
    searches by words, and a `vector` beside it replaces only the query's embedding."""
    return _object({p.name: json_schema(p, max_limit) for p in SEARCH_PARAMETERS if targets or not p.targets},
                   required=("query",))


def tenant_refs(registry: TenantRegistry | None, tenant: str) -> list[CollectionRef]:
    """The tenant's collections that asked for their own tool pair."""
    return [ref for ref in registry.collections(tenant) if ref.config.tool_prefix] if registry else []


@dataclass(frozen=True, slots=True)
class _Tool:
    definition: ToolDefinition
    call: Callable[[Principal, dict[str, Any]], Any]
    # The shared tool this one is a form of: search, getSource or validateCitations.
    base: str


class Tools:
    """Calls a tool by name for an authenticated principal; returns (text, structured result)."""

    def __init__(self, searcher: Searcher, max_limit: int, registry: TenantRegistry | None = None) -> None:
        self._searcher = searcher
        self._definitions = {d.name: d for d in definitions(max_limit)}
        calls: dict[str, Callable[..., Any]] = {
            "search": self._search, "getSource": self._source, "validateCitations": self._validate}
        self._base = {name: _Tool(d, calls[name], name) for name, d in self._definitions.items()}
        self._max_limit = max_limit
        self._registry = registry
        # Built on a tenant's first call and rebuilt when its config changes (the platform API, a reload).
        self._per_tenant: PerTenant[dict[str, _Tool]] | None = (
            PerTenant(registry.get, self._tools_of) if registry is not None else None)

    def _tools(self, tenant: str) -> dict[str, _Tool]:
        if self._per_tenant is None or self._registry is None or tenant not in self._registry:
            return self._base
        return self._per_tenant.get(tenant)

    def _tools_of(self, tenant: TenantConfig) -> dict[str, _Tool]:
        tools = dict(self._base)
        for ref in tenant_refs(TenantRegistry({tenant.id: tenant}), tenant.id):
            for definition in collection_definitions(ref, self._max_limit):
                if definition.name.endswith("Search"):
                    tools[definition.name] = _Tool(definition, partial(self._collection_search, ref), "search")
                else:
                    tools[definition.name] = _Tool(definition, partial(self._collection_source, ref), "getSource")
        return tools

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The tools every tenant has."""
        return tuple(self._definitions.values())

    def definitions_for(self, tenant: str) -> tuple[ToolDefinition, ...]:
        """The tenant's tools: the shared ones, then its collections' pairs."""
        return tuple(t.definition for t in self._tools(tenant).values())

    def base_name(self, tenant: str, name: str) -> str | None:
        """`search`, `getSource` or `validateCitations` for one of the tenant's tools (a collection
        pair maps to the first two), None for a name the tenant does not have."""
        tool = self._tools(tenant).get(name)
        return tool.base if tool is not None else None

    async def call(self, principal: Principal, name: str, arguments: Mapping[str, Any] | None) -> tuple[str, dict]:
        tools = self._tools(principal.tenant)
        tool = tools.get(name)
        if tool is None:
            raise InvalidInput(f"tool {name!r} does not exist; tools: {allowed(tools)}")
        args = dict(arguments or {})
        check_json(args, where=f"tool {name!r} arguments", max_depth=MAX_ARGUMENT_DEPTH)
        args = _checked(tool.definition, _canonical_spellings(args))
        return await tool.call(principal, args)

    async def _collection_search(self, ref: CollectionRef, principal: Principal,
                                 args: dict[str, Any]) -> tuple[str, dict]:
        return await self._search(principal, {**args, "namespace": ref.scope.namespace,
                                              "collection": ref.scope.collection})

    async def _collection_source(self, ref: CollectionRef, principal: Principal,
                                 args: dict[str, Any]) -> tuple[str, dict]:
        return await self._source(principal, {**args, "namespace": ref.scope.namespace,
                                              "collection": ref.scope.collection})

    async def _search(self, principal: Principal, args: dict[str, Any]) -> tuple[str, dict]:
        typed = {**args}
        for name, kind in _ENUMS.items():
            if name in typed:
                typed[name] = kind[typed[name]]
        if "filter" in typed:
            typed["filter"] = filter_from_json(typed["filter"])
        if "sort" in typed:
            typed["sort"] = [SortKey(k["field"], SortOrder[k.get("order", "ASC")]) for k in typed["sort"]]
        if "facets" in typed:
            typed["facets"] = [FacetSpec(f["field"], f.get("size", DEFAULT_BUCKETS), f.get("interval"),
                                         DateInterval[f["dateInterval"]] if f.get("dateInterval") else None)
                               for f in typed["facets"]]
        request = search_request(typed)
        result = await self._searcher.search(principal, request)
        text = render_context(request.query, result.hits, reasons=result.trace.all_warnings()).text
        marks = (await self._searcher.highlight(principal, result.searched, request.vector, result.hits)
                 if args.get("highlights") else None)
        payload = {"hits": [_hit(h, rank, marks[rank - 1] if marks else None)
                            for rank, h in enumerate(result.hits, start=1)],
                   "traceId": result.trace.trace_id, "warnings": list(result.trace.warnings),
                   "abstained": result.abstained,
                   "partialFailures": [{"collection": f.collection, "code": f.code} for f in result.failures]}
        if result.groups is not None:
            payload["groups"] = [{"namespace": g.namespace, "collection": g.collection, "sourceId": g.source_id,
                                  "score": g.score, "citations": [marker(h) for h in g.hits]} for g in result.groups]
        if result.facets is not None:
            payload["facets"] = _facets(result.facets)
        return text, payload

    async def _source(self, principal: Principal, args: dict[str, Any]) -> tuple[str, dict]:
        found = await self._searcher.source(principal, args["namespace"], args["sourceId"], args.get("collection"))
        chunks = [{"chunkId": c.chunk_id, "content": c.text, "citation": format_marker(c.source_id, c.chunk_id)}
                  for c in found.chunks]
        first = found.chunks[0]
        text = "\n".join(f"{c['citation']} {c['content']}" for c in chunks)
        return text, {"namespace": found.ref.scope.namespace, "collection": found.ref.scope.collection,
                      "sourceId": args["sourceId"], "title": first.title or None,
                      "url": first.source_url or first.source_path or None, "chunks": chunks}

    async def _validate(self, principal: Principal, args: dict[str, Any]) -> tuple[str, dict]:
        evidence = [Evidence(e["sourceId"], e["chunkId"], e["content"]) for e in args["evidence"]]
        report = validate_citations(args["answer"], evidence, required=args.get("required", False))
        if args.get("support", True):
            report = await check_support_bundled(report, evidence)
        payload = {"valid": report.valid,
                   "citations": [{"marker": c.marker, "sourceId": c.source_id, "chunkId": c.chunk_id,
                                  "status": c.status.value, "sentence": c.sentence, "quote": c.quote,
                                  "support": None if c.support is None else {
                                      "verdict": c.support.verdict.value, "score": c.support.score,
                                      "supportedAt": c.support.thresholds.supported_at,
                                      "weakAt": c.support.thresholds.weak_at}}
                                 for c in report.citations],
                   "uncitedSentences": [{"index": s.index, "text": s.text} for s in report.uncited],
                   "unchecked": report.unchecked}
        bad = [c for c in report.citations if c.status.value != "valid"]
        unsupported = [c for c in report.citations if c.unsupported]
        text = ("all citations are valid" if report.valid else
                f"{len(bad)} citation(s) not valid, {len(unsupported)} unsupported by their chunk, "
                f"{len(report.uncited)} sentence(s) without a citation")
        return text, payload


def _hit(hit: Hit, rank: int, marks: Highlights | None = None) -> dict[str, Any]:
    found = {"rank": rank, "namespace": hit.namespace, "collection": hit.collection, "sourceId": hit.source_id,
             "chunkId": hit.chunk_id, "score": hit.score, "content": hit.content, "title": hit.title,
             "url": hit.source_url or hit.source_path, "trustTier": hit.provenance.trust_tier,
             "citation": marker(hit)}
    if marks is not None:  # as GraphQL's Highlights: code-point offsets into `content`
        sentence = marks.sentence
        found["highlights"] = {
            "spans": [{"start": s.start, "end": s.end, "text": hit.content[s.start:s.end], "term": s.term}
                      for s in marks.spans],
            "sentence": None if sentence is None else {
                "start": sentence.start, "end": sentence.end, "text": hit.content[sentence.start:sentence.end],
                "score": sentence.score},
            "truncated": marks.truncated}
    return found


def _facets(counts: FacetCounts) -> dict[str, Any]:
    """As GraphQL's Facets."""
    return {"depth": counts.depth, "counted": counts.counted, "complete": counts.complete,
            "fields": [{"field": f.field, "other": f.other, "missing": f.missing,
                        "buckets": [{"label": b.label, "count": b.count, "value": b.value, "start": b.start,
                                     "end": b.end} for b in f.buckets]} for f in counts.facets]}


def _object(properties: Mapping[str, Any], *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required),
            "additionalProperties": False}


# The enumerated arguments; GraphQL spells each value as its member's name (Mode.HYBRID: HYBRID).
_ENUMS: dict[str, type[StrEnum]] = {"mode": Mode, "fusion": Fusion, "groupBy": GroupBy}


def _canonical_spellings(args: dict[str, Any]) -> dict[str, Any]:
    """A copy with the lower-case enum values (`hybrid`) as the tool schema's GraphQL names (`HYBRID`),
    and a filter's ops as the values the filter parser reads (`GTE` as `gte`); anything else is left
    for the checks to name."""
    fixed = {name: _member_name(_ENUMS[name], value) if name in _ENUMS else value for name, value in args.items()}
    if "filter" in fixed:
        fixed["filter"] = _filter_spellings(fixed["filter"])
    for name, key, kind in (("sort", "order", SortOrder), ("facets", "dateInterval", DateInterval)):
        if isinstance(fixed.get(name), list):
            fixed[name] = [{**item, key: _member_name(kind, item[key])} if isinstance(item, dict) and key in item
                           else item for item in fixed[name]]
    return fixed


def _member_name(kind: type[StrEnum], value: Any) -> Any:
    by_value = {member.value: member.name for member in kind}
    return by_value[value] if isinstance(value, str) and value in by_value else value


def _member_value(kind: type[StrEnum], value: Any) -> Any:
    return kind[value].value if isinstance(value, str) and value in kind.__members__ else value


def _filter_spellings(node: Any) -> Any:
    # Depth is bounded already: check_json refused arguments nested past MAX_ARGUMENT_DEPTH.
    if isinstance(node, list):
        return [_filter_spellings(child) for child in node]
    if not isinstance(node, dict):
        return node
    fixed = {key: _filter_spellings(value) if key in ("and", "or", "not") else value for key, value in node.items()}
    if "op" in fixed:
        fixed["op"] = _member_value(Op, fixed["op"])
    return fixed


_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "boolean": (bool,), "integer": (int,),
                                       "number": (int, float), "array": (list,), "object": (dict,)}


def _checked(definition: ToolDefinition, args: dict[str, Any]) -> dict[str, Any]:
    """Arguments against the tool's schema: names, presence, JSON types, enums and integer bounds."""
    return _check_object(definition.parameters, args, f"tool {definition.name!r}")


def _check_object(schema: Mapping[str, Any], value: dict[str, Any], where: str) -> dict[str, Any]:
    properties = schema["properties"]
    unknown = sorted(set(value) - set(properties))
    if unknown:
        raise InvalidInput(f"{where}: unknown argument(s) {', '.join(map(repr, unknown))}; "
                           f"allowed: {allowed(properties)}")
    missing = [name for name in schema["required"] if name not in value]
    if missing:
        raise InvalidInput(f"{where}: missing required argument(s) {', '.join(map(repr, missing))}")
    for name, item in value.items():
        _check_value(properties[name], item, f"{where} argument {name!r}")
    return {name: item for name, item in value.items() if item is not None}


def _check_value(schema: Mapping[str, Any], value: Any, where: str) -> None:
    kind = schema.get("type")
    if value is None:
        return
    if kind is None:
        return
    if not isinstance(value, _TYPES[kind]) or (kind in ("integer", "number") and isinstance(value, bool)):
        raise InvalidInput(f"{where} must be a {kind}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise InvalidInput(f"{where} is {value!r}; allowed: {allowed(schema['enum'])}")
    if kind == "integer" and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        raise InvalidInput(f"{where} is {value}; allowed: {schema['minimum']} to {schema['maximum']}")
    if kind == "array":
        for index, item in enumerate(value):
            _check_value(schema["items"], item, f"{where}[{index}]")
    if kind == "object" and "properties" in schema:
        _check_object(schema, value, where)
