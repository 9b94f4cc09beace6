"""GraphQL inputs and their conversion to domain values (validated here, once)."""

from __future__ import annotations


import strawberry
from strawberry.scalars import JSON

from gateway.errors import InvalidFilter, InvalidInput
from gateway.graphql.enums import DateIntervalEnum, FilterOpEnum, FusionEnum, GroupByEnum, ModeEnum, SortOrderEnum
from gateway.grounding.citations import Evidence
from gateway.ingest.loaders import Document
from gateway.ingest.vectors import VectorChunk
from gateway.retrieval.facets import DEFAULT_BUCKETS, MAX_BUCKETS, DateInterval, FacetSpec
from gateway.retrieval.sorting import SortKey, SortOrder
from gateway.storage.vectors import parse_vector
from gateway.routing.parameters import PARAMETERS, search_request
from gateway.routing.searcher import SearchRequest
from gateway.storage.filters import And, Condition, FilterNode, Not, Op, Or, check_size, filter_value
from gateway.storage.identifiers import check_source_id


@strawberry.input(description=(
    "A structured filter: either a condition (field, op, value) or exactly one of and / or / not. "
    "Fields: source_id, chunk_id, title, source_url, source_path, content_hash, created_at, "
    "updated_at, and metadata.<key> for keys the collection declares."))
class FilterInput:
    field: str | None = strawberry.field(default=None, description=(
        "A condition's field: source_id, chunk_id, title, source_url, source_path, content_hash, created_at, "
        "updated_at (the times in epoch milliseconds), or metadata.<key> for a key the collection declares in "
        "metadataFields"))
    op: FilterOpEnum | None = strawberry.field(default=None, description=(  # type: ignore[valid-type]
        "A condition's operator; IN, NIN, CONTAINS_ANY and CONTAINS_ALL take a list as value, the others one "
        "value"))
    value: JSON | None = strawberry.field(default=None, description=(
        "A condition's value: a string, a boolean, a finite number or an int64 integer, or for IN, NIN, "
        "CONTAINS_ANY and CONTAINS_ALL a non-empty list of them; EXISTS and IS_NULL take true or false. Text "
        "fields take strings; created_at and updated_at take integers (epoch milliseconds) or ISO 8601 "
        "DateTime strings: a date (2026-03-01, midnight UTC) or a date-time with an offset "
        "(2026-03-01T12:00:00Z)"))
    and_: list[FilterInput] | None = strawberry.field(name="and", default=None, description=(
        "Every one of these filters holds (at least one filter)"))
    or_: list[FilterInput] | None = strawberry.field(name="or", default=None, description=(
        "At least one of these filters holds (at least one filter)"))
    not_: FilterInput | None = strawberry.field(name="not", default=None, description="This filter does not hold")

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


@strawberry.input(description=(
    "A chunk the client cut and embedded itself: stored as given, with its vector (no embedder call)."))
class ChunkInput:
    text: str = strawberry.field(description="The chunk's text: the hit's content and what BM25 indexes")
    vector: list[float] = strawberry.field(description=(
        "The chunk's dense vector: finite numbers, as many as the collection's dimension "
        "(CollectionInfo.dimension); compared by cosine, so it need not be normalised"))
    parent: int | None = strawberry.field(default=None, description=(
        "Index of the chunk's parent within the document: chunks of one index make one parent (their texts "
        "joined), returned by parent expansion. Give it on every chunk or none; default: consecutive chunks "
        "are grouped into parents of at most the collection's parent_chars"))


@strawberry.input(description=(
    "A document to index, idempotent by content hash: `text` is chunked and embedded by the gateway; `text` with "
    "`vector` is one chunk with the client's vector; `chunks` are the client's chunks with their vectors."))
class DocumentInput:
    source_id: str = strawberry.field(description=(
        "The document's id in the collection: 1 to 512 printable characters. Sending an id again replaces that "
        "source: changed chunks are written, chunks it no longer has are deleted"))
    text: str | None = strawberry.field(default=None, description=(
        "The document's full text; it is cut into parents and chunks (with `vector`: stored as one chunk). "
        "Required unless `chunks` is given"))
    vector: list[float] | None = strawberry.field(default=None, description=(
        "With `text`: the document is one chunk and this is its dense vector (see ChunkInput.vector); "
        "default: the gateway embeds the text"))
    chunks: list[ChunkInput] | None = strawberry.field(default=None, description=(
        "The document cut into chunks by the client, each with its vector; instead of `text`. Chunk ids are "
        "their positions (\"0\", \"1\", ...); a chunk re-sent with the same text and vector is not rewritten"))
    title: str | None = strawberry.field(default=None, description=(
        "The document's title, stored on each of its chunks; default: none"))
    metadata: JSON | None = strawberry.field(default=None, description=(
        "A JSON object stored on each chunk (at most GATEWAY_MAX_METADATA_BYTES, 8 KiB as JSON); the keys the "
        "collection declares (CollectionInfo.metadataFields) can be filtered on as metadata.<key>; default: {}"))
    source_url: str | None = strawberry.field(default=None, description=(
        "Where the original lives, returned with hits for citations; default: none"))
    source_path: str | None = strawberry.field(default=None, description=(
        "The original's file path, returned with hits; default: none"))

    def to_domain(self, index: int = 0) -> Document:
        """The domain document; `index` (its place in `documents`) names it in errors."""
        check_source_id(self.source_id)
        if self.metadata is not None and not isinstance(self.metadata, dict):
            raise InvalidInput(f"metadata of document {self.source_id!r} must be a JSON object, "
                               f"got {type(self.metadata).__name__}")
        where = f"documents[{index}]"
        if self.chunks is not None:
            if self.text is not None or self.vector is not None:
                raise InvalidInput(f"{where} has chunks and {'text' if self.text is not None else 'vector'}; "
                                   "allowed: text (optionally with vector), or chunks alone")
            chunks = tuple(VectorChunk(c.text, parse_vector(c.vector, f"vector of {where}.chunks[{j}]"), c.parent)
                           for j, c in enumerate(self.chunks))
            text = ""
        else:
            if self.text is None:
                raise InvalidInput(f"{where} has neither text nor chunks; send one of them")
            text = self.text
            chunks = () if self.vector is None else (VectorChunk(text, parse_vector(self.vector,
                                                                                    f"vector of {where}")),)
        return Document(source_id=self.source_id, text=text, title=self.title or "",
                        metadata=dict(self.metadata or {}), source_url=self.source_url or "",
                        source_path=self.source_path or "", chunks=chunks)


@strawberry.input(description="A hit an answer was written from: its citation ids and the content it showed.")
class EvidenceInput:
    source_id: str = strawberry.field(description="The evidence hit's chunk.sourceId")
    chunk_id: str = strawberry.field(description="The evidence hit's chunk.chunkId")
    content: str = strawberry.field(description=(
        "The hit's content as the answer's writer saw it: quoted spans are checked against this text"))

    def to_domain(self) -> Evidence:
        return Evidence(self.source_id, self.chunk_id, self.content)


@strawberry.input(description=(
    "Where validateCitations reads evidence from the store: the chunks each marker names, looked up by id in the "
    "caller's tenant (a source the tenant does not hold leaves its markers UNKNOWN)."))
class StoredEvidenceInput:
    namespace: str = strawberry.field(description="The namespace the cited sources are in")
    collection: str | None = strawberry.field(default=None, description=(
        "The collection to read; default: the namespace's collections in turn, the first that has the source"))


def _about(name: str) -> str:
    return PARAMETERS[name].description


@strawberry.input(description=(
    "One sort key: a stored property and its direction. Hits equal on every key keep their relevance order."))
class SortInput:
    field: str = strawberry.field(description=(
        "created_at, updated_at, title, source_id, source_path, source_url, page (a PDF chunk's page), or "
        "metadata.<key> for a key every searched collection declares (CollectionInfo.metadataFields)"))
    order: SortOrderEnum = strawberry.field(default=SortOrder.ASC, description=(  # type: ignore[valid-type]
        "ASC (default) or DESC; hits without the property come last either way"))

    def to_domain(self) -> SortKey:
        return SortKey(self.field, SortOrder(self.order))


@strawberry.input(description=(
    "One facet: count the search's matches by a property, in at most `size` buckets. Values are counted as they "
    "are; interval (numbers, page) or dateInterval (dates) count ranges instead."))
class FacetInput:
    field: str = strawberry.field(description=(
        "collection (namespace/collection), source_id, title, modality, page (PDF page ranges), created_at, "
        "updated_at (date buckets), or metadata.<key> for a key every searched collection declares"))
    size: int = strawberry.field(default=DEFAULT_BUCKETS, description=(
        f"The most buckets returned, 1 to {MAX_BUCKETS}; the rest are summed in Facet.other"))
    interval: float | None = strawberry.field(default=None, description=(
        "Count ranges this wide instead of values: numbers (metadata) and page (whole pages; default 10, "
        "buckets 1-10, 11-20, ...)"))
    date_interval: DateIntervalEnum | None = strawberry.field(default=None, description=(  # type: ignore[valid-type]
        "Count calendar buckets (UTC): created_at and updated_at (default MONTH), or a metadata key holding "
        "ISO-8601 dates"))

    def to_domain(self) -> FacetSpec:
        return FacetSpec(self.field, self.size, self.interval,
                         None if self.date_interval is None else DateInterval(self.date_interval))


@strawberry.input(description=(
    "One search, as `search`, `context` and the MCP `search` tool take it (gateway/routing/parameters.py lists "
    "the parameters once). `collection` or `collections` choose explicitly; `federated: true` searches every "
    "collection (optionally only in `namespaces`); otherwise the tenant's routers decide."))
class SearchInput:
    query: str | None = strawberry.field(default=None, description=_about("query"))
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
    vector: list[float] | None = strawberry.field(default=None, description=_about("vector"))
    sort: list[SortInput] | None = strawberry.field(default=None, description=_about("sort"))
    facets: list[FacetInput] | None = strawberry.field(default=None, description=_about("facets"))
    facet_depth: int | None = strawberry.field(default=None, description=_about("facetDepth"))
    highlights: bool = strawberry.field(default=False, description=_about("highlights"))

    def to_request(self) -> SearchRequest:
        return search_request({
            "query": self.query, "namespace": self.namespace, "collection": self.collection,
            "collections": self.collections, "namespaces": self.namespaces, "federated": self.federated,
            "metadata": self.metadata, "mode": self.mode, "fusion": self.fusion, "alpha": self.alpha,
            "limit": self.limit, "threshold": self.threshold,
            "filter": self.filter.to_domain() if self.filter is not None else None, "pipeline": self.pipeline,
            "conversationId": self.conversation_id, "autocut": self.autocut, "groupBy": self.group_by,
            "hitsPerGroup": self.hits_per_group, "image": self.image, "vector": self.vector,
            "sort": None if self.sort is None else [key.to_domain() for key in self.sort],
            "facets": None if self.facets is None else [facet.to_domain() for facet in self.facets],
            "facetDepth": self.facet_depth, "highlights": self.highlights})
