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
from gateway.retrieval.options import Fusion, Mode
from gateway.retrieval.shaping import DEFAULT_HITS_PER_GROUP, MAX_AUTOCUT, GroupBy, Shaping
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
    items: str | None = None
    minimum: int | None = None
    # "max_limit": bounded by GATEWAY_MAX_LIMIT, known only when the tools are built.
    maximum: int | str | None = None


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
)
PARAMETERS: Mapping[str, Parameter] = {p.name: p for p in SEARCH_PARAMETERS}


def json_schema(parameter: Parameter, max_limit: int) -> dict[str, Any]:
    """The parameter as a JSON Schema property (for the MCP and OpenAI tool definitions)."""
    schema: dict[str, Any] = {"type": parameter.type, "description": parameter.description}
    if parameter.enum:
        schema["enum"] = list(parameter.enum)
    if parameter.items:
        schema["items"] = {"type": parameter.items}
    if parameter.minimum is not None:
        schema["minimum"] = parameter.minimum
    if parameter.maximum is not None:
        schema["maximum"] = max_limit if parameter.maximum == "max_limit" else parameter.maximum
    return schema


def search_request(values: Mapping[str, Any]) -> SearchRequest:
    """A SearchRequest from parameters by wire name, already typed by the transport (a FilterNode,
    Mode, Fusion, GroupBy); None or absent means "not given"."""
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
        shaping=_shaping(get("autocut"), get("groupBy"), get("hitsPerGroup")), image=_image(get("image")),
        vector=None if get("vector") is None else parse_vector(get("vector"), "query vector"))


def _image(encoded: str | None) -> Any:
    """The decoded query image (checked: PNG or JPEG, size and pixel bounds), or None."""
    if encoded is None:
        return None
    return open_image(decode_base64_image(encoded), where="query image", max_bytes=MAX_QUERY_IMAGE_BYTES)


def _shaping(autocut: int | None, group_by: GroupBy | None, hits_per_group: int | None) -> Shaping:
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
                   hits_per_group=hits_per_group if hits_per_group is not None else DEFAULT_HITS_PER_GROUP)
