"""The search parameters, listed once.

GraphQL's `SearchInput` (used by `search` and `context`) and the MCP `search` tool take the
same parameters, under the same names, with the same descriptions and the same enum spellings
(GraphQL's: `HYBRID`, `GTE`, so a model's tool arguments are valid GraphQL variables): the MCP tool's JSON Schema
is built from this list, `SearchInput` reads its descriptions from it (a test checks that its
fields are exactly these), and both transports build their `SearchRequest` with `search_request`,
so a parameter added here reaches every entry point or fails a test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.embedding.images import MAX_QUERY_IMAGE_BYTES, decode_base64_image, open_image
from gateway.errors import InvalidInput
from gateway.storage.vectors import parse_vector
from gateway.retrieval.facets import (DEFAULT_BUCKETS, DEFAULT_FACET_DEPTH, DEFAULT_PAGE_INTERVAL, FACET_FIELDS,
                                      MAX_BUCKETS, MAX_FACET_DEPTH, DateInterval, FacetSpec, check_facets)
from gateway.retrieval.options import Fusion, Mode
from gateway.retrieval.shaping import DEFAULT_HITS_PER_GROUP, MAX_AUTOCUT, GroupBy, Shaping
from gateway.retrieval.sorting import MAX_SORT_KEYS, SORT_FIELDS, SortKey, SortOrder, check_sort
from gateway.routing.searcher import SearchRequest
from gateway.storage.filters import Op

# Hits a group may keep: a group is one source's best chunks, and sources rarely have more.
MAX_HITS_PER_GROUP = 20


@dataclass(frozen=True, slots=True)
class Parameter:
    """One search parameter: its wire name, JSON type (for the MCP schema) and description."""

    name: str
    type: str
    description: str
    # Chooses the collections; a collection's own tool (`<prefix>Search`) has them bound already.
    targets: bool = False
    enum: tuple[str, ...] = ()
    # The items' JSON type, or for a list of objects the items' JSON Schema.
    items: str | Mapping[str, Any] | None = None
    minimum: int | None = None
    # "max_limit": bounded by GATEWAY_MAX_LIMIT, known only when the tools are built.
    maximum: int | str | None = None


def _object_items(properties: Mapping[str, Any], required: tuple[str, ...]) -> Mapping[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required),
            "additionalProperties": False}


_FIELD_NAMES = "{}, or metadata.<key> for a key every searched collection declares (metadataFields)"
SORT_ABOUT = ("Reorder the ranked hits by stored properties, relevance breaking ties: a list of {field, order}, at "
              f"most {MAX_SORT_KEYS}; field: " + _FIELD_NAMES.format(", ".join(SORT_FIELDS)) + "; order ASC "
              "(default) or DESC. Sorts the `limit` best hits (after pipeline stages and autocut, before groupBy "
              "and pages); hits without the property come last.")
FACETS_ABOUT = ("Count the search's matches by properties: a list of {field, size, interval, dateInterval}, each "
                "counted over the first facetDepth hits of the same retrieval (not just the page); field: "
                + _FIELD_NAMES.format(", ".join(FACET_FIELDS)) + f"; size: buckets returned, 1 to {MAX_BUCKETS} "
                f"(default {DEFAULT_BUCKETS}); interval: range width for numbers and page (default "
                f"{DEFAULT_PAGE_INTERVAL} pages); dateInterval: DAY, WEEK, MONTH or YEAR for created_at, "
                "updated_at (default MONTH) and ISO-8601 date metadata.")


SEARCH_PARAMETERS: tuple[Parameter, ...] = (
    Parameter("query", "string", "The question or keywords (at most GATEWAY_MAX_QUERY_CHARS characters). "
                                 "Required unless `vector` is given."),
    Parameter("namespace", "string", "Only collections of this namespace (with `collection`, the collection's "
                                     "namespace when its name is not unique).", targets=True),
    Parameter("collection", "string", "Search this one collection; omit to let the tenant's routers choose.",
              targets=True),
    Parameter("collections", "array", "Search these collections together (federated), bypassing the routers.",
              targets=True, items="string"),
    Parameter("namespaces", "array", "With `federated`: only the collections of these namespaces.",
              targets=True, items="string"),
    Parameter("federated", "boolean", "Search every collection of the tenant at once (default false).",
              targets=True),
    Parameter("metadata", "object", "Request metadata that the tenant's metadata routers read, e.g. "
                                    "{\"source\": \"tickets\"}.", targets=True),
    Parameter("mode", "string", "DENSE, SPARSE (BM25) or HYBRID; default: the collection's.",
              enum=tuple(m.name for m in Mode)),
    Parameter("fusion", "string", "How hybrid lists are fused: RRF, DBSF or WEIGHTED; default: the collection's.",
              enum=tuple(f.name for f in Fusion)),
    Parameter("alpha", "number", "Weight of the dense list, 0 to 1 (1 = dense only); default: the collection's."),
    Parameter("limit", "integer", "How many ranked hits the search returns (pages are cut from these); default: "
                                  "the collection's limit, at most GATEWAY_MAX_LIMIT.", minimum=1,
              maximum="max_limit"),
    Parameter("threshold", "number", "Drop hits scoring under this (scores are higher-is-better)."),
    Parameter("filter", "object", "A structured filter: {field, op, value}, or exactly one of {and: [...]}, "
                                  "{or: [...]}, {not: {...}}; op is one of " + ", ".join(o.name for o in Op)
              + " (IN, NIN, CONTAINS_ANY and CONTAINS_ALL take a list; EXISTS and IS_NULL take true or false; "
                "created_at and updated_at take epoch milliseconds or ISO 8601 dates)."),
    Parameter("pipeline", "string", "One of the tenant's pipelines; default: the collection's or the federation's."),
    Parameter("conversationId", "string", "Record the search as a turn of this conversation and resolve "
                                          "follow-ups (\"who wrote it?\") against its earlier turns."),
    Parameter("autocut", "integer", "Cut the ranked hits at the Nth large score jump (Weaviate's autocut: 1 keeps "
                                    "the hits before the first jump). Applied after every pipeline stage, before "
                                    "grouping and pages.", minimum=1, maximum=MAX_AUTOCUT),
    Parameter("groupBy", "string", "Group the ranked hits: source groups each source's best hits together, "
                                   "groups ordered by their best hit.", enum=tuple(g.name for g in GroupBy)),
    Parameter("hitsPerGroup", "integer", f"With groupBy: hits kept per group (default {DEFAULT_HITS_PER_GROUP}).",
              minimum=1, maximum=MAX_HITS_PER_GROUP),
    Parameter("image", "string", "Search by this image instead of the query's text: base64 PNG or JPEG, at most "
                                 "4 MiB. Only collections whose encoder maps images take it; `query` then only "
                                 "routes and labels the search."),
    Parameter("vector", "array", "Search by this dense vector (the client's own embedding of the query) instead "
                                 "of embedding `query`: as many numbers as the collection's dimension. With "
                                 "`query`, BM25 still runs on its text (sparse, hybrid); without, the search is "
                                 "dense only.", items="number"),
    Parameter("sort", "array", SORT_ABOUT, items=_object_items({
        "field": {"type": "string"}, "order": {"type": "string", "enum": [o.name for o in SortOrder]}},
        ("field",))),
    Parameter("facets", "array", FACETS_ABOUT, items=_object_items({
        "field": {"type": "string"}, "size": {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS},
        "interval": {"type": "number"}, "dateInterval": {"type": "string", "enum": [d.name for d in DateInterval]}},
        ("field",))),
    Parameter("facetDepth", "integer", f"With facets: how many of the search's best matches are counted, 1 to "
                                       f"{MAX_FACET_DEPTH} (default {DEFAULT_FACET_DEPTH}); a facet is complete "
                                       "when fewer match.", minimum=1, maximum=MAX_FACET_DEPTH),
    Parameter("highlights", "boolean", "Agent tools: return each hit's highlights, the content's words matching the "
                                       "query's BM25 terms (code-point offsets), or for a hit without one its "
                                       "sentence most similar to the query (default false). GraphQL computes them "
                                       "when hits { highlights } is selected, whatever this says (it is accepted so "
                                       "that tool arguments are valid GraphQL variables)."),
)
PARAMETERS: Mapping[str, Parameter] = {p.name: p for p in SEARCH_PARAMETERS}


def json_schema(parameter: Parameter, max_limit: int) -> dict[str, Any]:
    """The parameter as a JSON Schema property (for the MCP and OpenAI tool definitions)."""
    schema: dict[str, Any] = {"type": parameter.type, "description": parameter.description}
    if parameter.enum:
        schema["enum"] = list(parameter.enum)
    if isinstance(parameter.items, str):
        schema["items"] = {"type": parameter.items}
    elif parameter.items is not None:
        schema["items"] = dict(parameter.items)
    if parameter.minimum is not None:
        schema["minimum"] = parameter.minimum
    if parameter.maximum is not None:
        schema["maximum"] = max_limit if parameter.maximum == "max_limit" else parameter.maximum
    return schema


def search_request(values: Mapping[str, Any]) -> SearchRequest:
    """A SearchRequest from parameters by wire name, already typed by the transport (a FilterNode,
    Mode, Fusion, GroupBy, SortKeys, FacetSpecs); None or absent means "not given". `highlights`
    is the transport's to act on (it changes what is shown, not what is searched)."""
    unknown = sorted(set(values) - set(PARAMETERS))
    if unknown:  # a transport's own mistake, so it fails loudly
        raise ValueError(f"unknown search parameter(s) {unknown}; known: {sorted(PARAMETERS)}")
    get = values.get
    if get("vector") is not None and get("image") is not None:
        raise InvalidInput("image and vector are both given; a search is by one of them: send image or vector")
    metadata = get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidInput(f"metadata must be a JSON object, got {type(metadata).__name__}")
    return SearchRequest(
        query=get("query") or "", namespace=get("namespace"), collection=get("collection"), mode=get("mode"),
        limit=get("limit"), threshold=get("threshold"), filter=get("filter"), fusion=get("fusion"),
        alpha=get("alpha"), collections=tuple(get("collections")) if get("collections") else None,
        namespaces=tuple(get("namespaces")) if get("namespaces") else None, federated=bool(get("federated")),
        metadata=dict(metadata or {}), pipeline=get("pipeline"), conversation_id=get("conversationId"),
        shaping=_shaping(get("autocut"), get("groupBy"), get("hitsPerGroup"), get("sort")),
        image=_image(get("image")), vector=None if get("vector") is None else parse_vector(get("vector"), "query vector"),
        **_facets(get("facets"), get("facetDepth")))


def _facets(specs: list[FacetSpec] | None, depth: int | None) -> dict[str, Any]:
    if not specs:
        if depth is not None:
            raise InvalidInput(f"facetDepth {depth} needs facets; name at least one facet field")
        return {}
    checked, chosen = check_facets(specs, depth)
    return {"facets": checked, "facet_depth": chosen}


def _image(encoded: str | None) -> Any:
    """The decoded query image (checked: PNG or JPEG, size and pixel bounds), or None."""
    if encoded is None:
        return None
    return open_image(decode_base64_image(encoded), where="query image", max_bytes=MAX_QUERY_IMAGE_BYTES)


def _shaping(autocut: int | None, group_by: GroupBy | None, hits_per_group: int | None,
             sort: list[SortKey] | None) -> Shaping:
    if autocut is not None and not 1 <= autocut <= MAX_AUTOCUT:
        raise InvalidInput(f"autocut {autocut} is out of range; allowed: 1 to {MAX_AUTOCUT} (the number of score "
                           "jumps to keep hits up to); omit it to keep every hit")
    if hits_per_group is not None:
        if group_by is None:
            raise InvalidInput(f"hitsPerGroup {hits_per_group} needs groupBy; allowed groupBy: "
                               f"{', '.join(g.name for g in GroupBy)}")
        if not 1 <= hits_per_group <= MAX_HITS_PER_GROUP:
            raise InvalidInput(f"hitsPerGroup {hits_per_group} is out of range; allowed: 1 to {MAX_HITS_PER_GROUP}")
    return Shaping(autocut=autocut, group_by=group_by,
                   hits_per_group=hits_per_group if hits_per_group is not None else DEFAULT_HITS_PER_GROUP,
                   sort=check_sort(sort or ()))
