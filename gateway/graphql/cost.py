"""Estimate a GraphQL request's cost from its document and variables, before anything runs.

The arithmetic is gateway/admission/cost.py's; this module only reads the request: which root
fields it selects (aliases and fragments count once per selection), their arguments (literal
or variables), and whether hits ask for content and parents. A document that does not parse
costs 1 here: Strawberry answers it with the parse error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    value_from_ast_untyped,
)
from graphql.error import GraphQLError

from gateway.admission.cost import SearchShape, TenantCostModel, filter_values
from gateway.conversations.service import turn_cost
from gateway.errors import LimitExceeded
from gateway.graphql.documents import DocumentCache
from gateway.grounding.citations import cited
from gateway.grounding.names import names_in
from gateway.grounding.stored import MAX_STORED_SOURCES
from gateway.grounding.support import MAX_CHECKS
from gateway.tenancy.config import ConversationConfig
from gateway.tenancy.derived import PerTenant
from gateway.retrieval.facets import DEFAULT_FACET_DEPTH, MAX_FACET_DEPTH
from gateway.retrieval.options import Mode

# linkNames with `sources` reads this many BM25 hits per name (graphql/graph.py).
HITS_PER_NAME = 5

# Root fields of the schema; anything else is labelled "other" so metric labels stay bounded.
# (tests/graphql/test_cost.py checks it against the schema.)
ROOT_FIELDS = frozenset({"search", "context", "collections", "source", "validateCitations", "toolDefinitions",
                         "conversation", "upsertDocuments", "deleteSource", "deleteSources", "clearConversation", "addMemory",
                         "collectionStats", "sources", "compactCollection", "clearCollection",
                         "job", "startIngestJob", "searchProgress", "inferredEdges", "linkNames",
                         # The platform API (graphql/platform.py): a tenant key selecting these is refused.
                         "tenants", "tenant", "createTenant", "updateTenant", "deleteTenant", "addApiKey", "revokeApiKey",
                         "__schema", "__type", "__typename"})
MAX_OPERATION_NAME = 64
# Root fields that run a search, costed by its shape.
SEARCHES = frozenset({"search", "context", "searchProgress"})


@dataclass(frozen=True, slots=True)
class RequestEstimate:
    operation: str       # bounded label: "query:search", "mutation:upsertDocuments", ...
    name: str | None     # the client's operationName (a GraphQL Name), cut to 64 characters
    cost: int


UNPARSED = RequestEstimate("unparsed", None, 1)


def request_payload(method: str, body: bytes, query_params: Mapping[str, str]) -> dict[str, Any] | None:
    """{"query", "variables", "operationName"} from a POST JSON body or GET parameters."""
    try:
        if method == "GET":
            variables = query_params.get("variables")
            return {"query": query_params.get("query"), "operationName": query_params.get("operationName"),
                    "variables": json.loads(variables) if variables else None}
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


@dataclass(frozen=True, slots=True)
class _Root:
    """A root field as the estimate reads it: its node (for its arguments) and, for a search, which
    of content, parent and highlights its hits select."""

    field: FieldNode
    selected: frozenset[str] | None  # None: nested too deep to read, costed as malformed


@dataclass(frozen=True, slots=True)
class _Plan:
    """What an operation's estimate takes from its document alone, computed once per cached document."""

    roots: tuple[_Root, ...]
    label: str
    name: str | None


def estimate(payload: Mapping[str, Any] | None, model: TenantCostModel, documents: DocumentCache,
             conversations: ConversationConfig = ConversationConfig()) -> RequestEstimate:
    if payload is None or not isinstance(payload.get("query"), str):
        return UNPARSED
    text = payload["query"]
    try:
        # The object Strawberry will execute (the cache is per tenant: graphql/documents.py).
        document = documents.parse(text, tenant=model.tenant_id)
    except (GraphQLError, RecursionError):
        return UNPARSED
    variables = payload.get("variables")
    variables = variables if isinstance(variables, dict) else {}
    name = payload.get("operationName")
    operation = _operation(document, name if isinstance(name, str) else None)
    if operation is None:
        return UNPARSED
    # Keyed by the operation found, so a client's unknown operation names add nothing to the cache.
    plan = documents.derived(text, document, (_Plan, operation.name.value if operation.name else None),
                             lambda: _plan(document, operation), tenant=model.tenant_id)
    cost = 0
    for root in plan.roots:
        try:
            cost += _field_cost(root, variables, model, conversations)
        except (TypeError, ValueError, AttributeError, RecursionError):
            cost += 1  # malformed arguments: validation answers them
    return RequestEstimate(plan.label, plan.name, max(1, cost))


def _plan(document: DocumentNode, operation: OperationDefinitionNode) -> _Plan:
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    fields = _fields(operation.selection_set, fragments)
    roots = tuple(_Root(f, _selected(f, fragments) if f.name.value in SEARCHES else frozenset()) for f in fields)
    names = sorted({f.name.value if f.name.value in ROOT_FIELDS else "other" for f in fields})
    label = f"{operation.operation.value}:{'+'.join(names) or 'none'}"
    client_name = operation.name.value[:MAX_OPERATION_NAME] if operation.name else None
    return _Plan(roots, label, client_name)


def _operation(document: DocumentNode, name: str | None) -> OperationDefinitionNode | None:
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if name:
        operations = [o for o in operations if o.name is not None and o.name.value == name]
    return operations[0] if len(operations) == 1 else None


def _fields(selection_set: SelectionSetNode | None, fragments: Mapping[str, FragmentDefinitionNode],
            seen: frozenset[str] = frozenset()) -> list[FieldNode]:
    """Every field selected at this level, through fragments (each spread counts)."""
    out: list[FieldNode] = []
    for selection in selection_set.selections if selection_set else ():
        if isinstance(selection, FieldNode):
            out.append(selection)
        elif isinstance(selection, InlineFragmentNode):
            out.extend(_fields(selection.selection_set, fragments, seen))
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            if name in fragments and name not in seen:  # cycles are a validation error, not ours
                out.extend(_fields(fragments[name].selection_set, fragments, seen | {name}))
    return out


def _selected(field: FieldNode, fragments: Mapping[str, FragmentDefinitionNode]) -> frozenset[str] | None:
    try:
        return frozenset(_selects(field, {"content", "parent", "highlights"}, fragments))
    except RecursionError:
        return None


def _selects(field: FieldNode, names: set[str], fragments: Mapping[str, FragmentDefinitionNode]) -> set[str]:
    """Which of `names` appear anywhere under `field`."""
    found: set[str] = set()
    stack = list(_fields(field.selection_set, fragments))
    visited = 0
    while stack and visited < 10_000:
        visited += 1
        node = stack.pop()
        if node.name.value in names:
            found.add(node.name.value)
        stack.extend(_fields(node.selection_set, fragments))
    return found


def _field_cost(root: _Root, variables: Mapping[str, Any], model: TenantCostModel,
                conversations: ConversationConfig) -> int:
    field = root.field
    args = {a.name.value: value_from_ast_untyped(a.value, variables) for a in field.arguments or ()}
    name = field.name.value
    if name in SEARCHES:
        search_input = args.get("input")  # SearchInput: a literal object, or one variable
        args = search_input if isinstance(search_input, dict) else {}
        if root.selected is None:
            raise RecursionError("the field's selection is nested too deep to read")
        selected = set(root.selected)
        if name == "context":
            selected = {"content"} | (selected & {"highlights"})
        collections = args.get("collections")
        mode = args.get("mode")
        facets = args.get("facets")
        depth = args.get("facetDepth")
        facet_depth = (depth if isinstance(depth, int) and depth > 0 else DEFAULT_FACET_DEPTH) if facets else 0
        search = model.search(SearchShape(
            limit=args["limit"] if isinstance(args.get("limit"), int) else None,
            collections=len(collections) if isinstance(collections, list) and collections else None,
            named_collection=isinstance(args.get("collection"), str),
            pipeline=args.get("pipeline") if isinstance(args.get("pipeline"), str) else None,
            mode=Mode(mode.lower()) if isinstance(mode, str) and mode.lower() in set(Mode) else None,
            filter_values=filter_values(args.get("filter")),
            content="content" in selected, parent="parent" in selected, facet_depth=min(facet_depth, MAX_FACET_DEPTH),
            highlighted=_highlighted(selected, search_input, field, variables)))
        # A conversation turn may also search a follow-up's own words: one more search of this shape.
        return search + (turn_cost(conversations, search) if isinstance(args.get("conversationId"), str) else 0)
    if name == "collections":
        return model.collections()
    if name == "source":
        return model.source()
    if name == "validateCitations":
        return _citations_cost(args, model)
    if name == "inferredEdges":
        return model.source()
    if name == "linkNames":
        return _link_cost(args, model)
    if name == "upsertDocuments":
        documents = args.get("documents")
        documents = documents if isinstance(documents, list) else []
        chars = sum(len(d.get("text", "")) for d in documents if isinstance(d, dict) and isinstance(d.get("text"), str))
        return model.upsert(len(documents), chars)
    if name == "startIngestJob":
        # The job runs after the response, but it is this request's work: charged like upsertDocuments
        # (a file's text is about 3/4 of its base64).
        documents = [d for d in args.get("documents") or [] if isinstance(d, dict)]
        files = [f for f in args.get("files") or [] if isinstance(f, dict)]
        chars = sum(len(d["text"]) for d in documents if isinstance(d.get("text"), str)) + sum(
            len(f["contentBase64"]) * 3 // 4 for f in files if isinstance(f.get("contentBase64"), str))
        return model.upsert(len(documents) + len(files), chars)
    if name == "deleteSource":
        return model.delete()
    if name == "deleteSources":
        # A batch costs the store a few passes, as one delete does, plus its ids' rows.
        ids = args.get("sourceIds")
        return model.delete() + (len(ids) if isinstance(ids, list) else 0)
    if name == "addMemory":
        content = args.get("content")
        return model.upsert(1, len(content) if isinstance(content, str) else 0)
    if name in ("conversation", "clearConversation"):
        return 1 + 4 * conversations.max_turns
    return 1


def _highlighted(selected: set[str], search_input: Any, field: FieldNode, variables: Mapping[str, Any]) -> int:
    """How many hits may be highlighted: the page (`first`) when not grouped, else every hit (the limit
    bounds it in the cost model); 0 when highlights are not selected."""
    if "highlights" not in selected:
        return 0
    first = next((value_from_ast_untyped(a.value, variables) for a in field.arguments or ()
                  if a.name.value == "first"), None)
    grouped = isinstance(search_input, dict) and search_input.get("groupBy") is not None
    return first if isinstance(first, int) and first > 0 and not grouped else 1 << 30


def _citations_cost(args: Mapping[str, Any], model: TenantCostModel) -> int:
    answer = args.get("answer")
    try:
        markers = cited(answer) if isinstance(answer, str) else []
    except LimitExceeded:
        markers = []  # refused when it runs
    # Every marker may be its own (sentence, chunk) pair: an upper bound on the pairs scored.
    checks = min(len(markers), MAX_CHECKS) if args.get("support") is not False else 0
    sources = min(len({source for source, _ in markers}), MAX_STORED_SOURCES) if args.get("stored") else 0
    return model.citations(checks, sources)


def _link_cost(args: Mapping[str, Any], model: TenantCostModel) -> int:
    """linkNames: scanning the passages for each name; with `sources`, a BM25 search per name (and per name
    without its sentence-initial word)."""
    answer = args.get("answer")
    try:
        mentions = names_in(answer) if isinstance(answer, str) else []
    except LimitExceeded:
        mentions = []  # refused when it runs
    sources = args.get("sources")
    if isinstance(sources, dict):
        searches = sum(1 + (m.shorter is not None) for m in mentions)
        one = model.search(SearchShape(limit=HITS_PER_NAME, mode=Mode.SPARSE,
                                       named_collection=isinstance(sources.get("collection"), str)))
        return 1 + searches * one
    passages = args.get("passages")
    return 1 + len(mentions) * (len(passages) if isinstance(passages, list) else 0) // 10


def estimator(registry: Any, documents: DocumentCache) -> Callable[[str, str, bytes, Mapping[str, str]], RequestEstimate]:
    """The admission layer's estimator: a tenant's cost model is built on its first request and kept
    for the most recently used tenants."""
    models = PerTenant(registry.get, TenantCostModel)

    def estimate_request(tenant: str, method: str, body: bytes, params: Mapping[str, str]) -> RequestEstimate:
        return estimate(request_payload(method, body, params), models.get(tenant), documents,
                        registry.get(tenant).conversations)

    return estimate_request
