"""GraphQL inputs and their conversion to domain values (validated here, once)."""

from __future__ import annotations


import strawberry
from strawberry.scalars import JSON

from gateway.errors import InvalidFilter, InvalidInput
from gateway.graphql.types import FusionEnum, ModeEnum
from gateway.grounding.citations import Evidence
from gateway.ingest.loaders import Document
from gateway.retrieval.shaping import GroupBy
from gateway.routing.parameters import PARAMETERS, search_request
from gateway.routing.searcher import SearchRequest
from gateway.storage.filters import And, Condition, FilterNode, Not, Op, Or, check_size, filter_value
from gateway.storage.identifiers import check_source_id

FilterOpEnum = strawberry.enum(Op, name="FilterOp", description="eq ne gt gte lt lte on one value; in, nin on a list")
GroupByEnum = strawberry.enum(GroupBy, name="GroupBy", description="What a search's hits are grouped by: SOURCE, "
                                                                  "each source's best hits together.")


@strawberry.input(description=(
    "A structured filter: either a condition (field, op, value) or exactly one of and / or / not. "
    "Fields: source_id, chunk_id, title, source_url, source_path, content_hash, created_at, "
    "updated_at, and metadata.<key> for keys the collection declares."))
class FilterInput:
    field: str | None = None
    op: FilterOpEnum | None = None  # type: ignore[valid-type]
    value: JSON | None = None
    and_: list[FilterInput] | None = strawberry.field(name="and", default=None)
    or_: list[FilterInput] | None = strawberry.field(name="or", default=None)
    not_: FilterInput | None = strawberry.field(name="not", default=None)

    def to_domain(self) -> FilterNode:
        # Measured without recursion first: a 1,000-deep input is refused before it is walked.
        check_size(self, FilterInput._parts)
        return self._node()

    def _parts(self) -> tuple[list[FilterInput], int]:
        children = self.and_ or self.or_ or ([self.not_] if self.not_ is not None else [])
        return children, len(self.value) if isinstance(self.value, list) else int(self.field is not None)

    def _node(self) -> FilterNode:
        shapes = [name for name, value in (("condition", self.field is not None or self.op is not None),
                                           ("and", self.and_ is not None), ("or", self.or_ is not None),
                                           ("not", self.not_ is not None)) if value]
        if len(shapes) != 1:
            raise InvalidFilter(f"a filter node must be exactly one of: condition (field, op, value), and, or, not; "
                                f"got {', '.join(shapes) or 'nothing'}")
        if self.and_ is not None:
            return And(tuple(child._node() for child in self.and_))
        if self.or_ is not None:
            return Or(tuple(child._node() for child in self.or_))
        if self.not_ is not None:
            return Not(self.not_._node())
        if self.field is None or self.op is None:
            raise InvalidFilter("a filter condition needs field, op and value")
        return Condition(self.field, Op(self.op), filter_value(self.field, self.value))


@strawberry.input(description="A document to index: chunked, embedded and stored; idempotent by content hash.")
class DocumentInput:
    source_id: str
    text: str
    title: str | None = None
    metadata: JSON | None = None
    source_url: str | None = None
    source_path: str | None = None

    def to_domain(self) -> Document:
        check_source_id(self.source_id)
        if self.metadata is not None and not isinstance(self.metadata, dict):
            raise InvalidInput(f"metadata of document {self.source_id!r} must be a JSON object, "
                               f"got {type(self.metadata).__name__}")
        return Document(source_id=self.source_id, text=self.text, title=self.title or "",
                        metadata=dict(self.metadata or {}), source_url=self.source_url or "",
                        source_path=self.source_path or "")


@strawberry.input(description="A hit an answer was written from: its citation ids and the content it showed.")
class EvidenceInput:
    source_id: str
    chunk_id: str
    content: str

    def to_domain(self) -> Evidence:
        return Evidence(self.source_id, self.chunk_id, self.content)


def _about(name: str) -> str:
    return PARAMETERS[name].description


@strawberry.input(description=(
    "One search, as `search`, `context` and the MCP `search` tool take it (gateway/routing/parameters.py lists "
    "the parameters once). `collection` or `collections` choose explicitly; `federated: true` searches every "
    "collection (optionally only in `namespaces`); otherwise the tenant's routers decide."))
class SearchInput:
    query: str = strawberry.field(description=_about("query"))
    namespace: str | None = strawberry.field(default=None, description=_about("namespace"))
    collection: str | None = strawberry.field(default=None, description=_about("collection"))
    collections: list[str] | None = strawberry.field(default=None, description=_about("collections"))
    namespaces: list[str] | None = strawberry.field(default=None, description=_about("namespaces"))
    federated: bool = strawberry.field(default=False, description=_about("federated"))
    metadata: JSON | None = strawberry.field(default=None, description=_about("metadata"))
    mode: ModeEnum | None = strawberry.field(default=None, description=_about("mode"))  # type: ignore[valid-type]
    fusion: FusionEnum | None = strawberry.field(default=None, description=_about("fusion"))  # type: ignore[valid-type]
    alpha: float | None = strawberry.field(default=None, description=_about("alpha"))
    limit: int | None = strawberry.field(default=None, description=_about("limit"))
    threshold: float | None = strawberry.field(default=None, description=_about("threshold"))
    filter: FilterInput | None = strawberry.field(default=None, description=_about("filter"))
    pipeline: str | None = strawberry.field(default=None, description=_about("pipeline"))
    conversation_id: str | None = strawberry.field(default=None, description=_about("conversationId"))
    autocut: int | None = strawberry.field(default=None, description=_about("autocut"))
    group_by: GroupByEnum | None = strawberry.field(default=None, description=_about("groupBy"))  # type: ignore[valid-type]
    hits_per_group: int | None = strawberry.field(default=None, description=_about("hitsPerGroup"))
    image: str | None = strawberry.field(default=None, description=_about("image"))

    def to_request(self) -> SearchRequest:
        return search_request({
            "query": self.query, "namespace": self.namespace, "collection": self.collection,
            "collections": self.collections, "namespaces": self.namespaces, "federated": self.federated,
            "metadata": self.metadata, "mode": self.mode, "fusion": self.fusion, "alpha": self.alpha,
            "limit": self.limit, "threshold": self.threshold,
            "filter": self.filter.to_domain() if self.filter is not None else None, "pipeline": self.pipeline,
            "conversationId": self.conversation_id, "autocut": self.autocut, "groupBy": self.group_by,
            "hitsPerGroup": self.hits_per_group, "image": self.image})
