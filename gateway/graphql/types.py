"""GraphQL output types, converted from domain values at the edge."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import strawberry
from strawberry.dataloader import DataLoader
from strawberry.scalars import JSON
from strawberry.types import Info

from gateway.graphql.context import Context
from gateway.graphql.enums import (
    CitationStatusEnum,
    SupportVerdictEnum,
    FusionEnum,
    ModalityEnum,
    ModeEnum,
    PhaseEnum,
    StageStatusEnum,
    TrustTierEnum,
)
from gateway.conversations.memory import Memory
from gateway.conversations.turns import Turn
from gateway.embedding.base import Modality
from gateway.grounding import citations
from gateway.grounding.support import MAX_CHECKS
from gateway.ingest.sync import IngestReport
from gateway.retrieval import facets as faceting
from gateway.retrieval import highlights as highlighting
from gateway.retrieval import hit as domain
from gateway.retrieval import trace as tracing
from gateway.retrieval.options import Mode
from gateway.retrieval.retrievers import epoch_ms_to_datetime
from gateway.storage.milvus import ParentRecord, StoredChunk
from gateway.tenancy.config import TrustTier
from gateway.tenancy.registry import CollectionRef

SUMMARY_CHARS = 300
# A hit's highlights by its 0-based place in the search's ranked hits, computed once per page.
HighlightLoader = DataLoader[int, highlighting.Highlights]


@strawberry.type(description="One signal's raw score (higher is better) and 1-based rank for a hit.")
class SignalScore:
    signal: str = strawberry.field(description=(
        "Which signal scored the hit: dense, sparse, collection:<namespace>/<collection> (its place in its own "
        "collection, in a federated search), rerank:<reranker>, expand:match, followUp:boost, memory, "
        "memory:recency, memory:relevance, memory:importance, or custom:<namespace>/<collection> for a custom "
        "retriever"))
    raw: float = strawberry.field(description=(
        "The signal's own score for the hit, higher is better. Scales differ per signal (cosine similarity, BM25,"
        " a reranker's score, a fused total), so compare raw scores within one signal only"))
    rank: int = strawberry.field(description="The hit's 1-based rank in that signal's list")
    normalized: float | None = strawberry.field(default=None, description=(
        "The raw score on a 0..1 scale, beside it, for the dense and sparse signals: dense (cosine similarity) as "
        "(1 + cosine) / 2, absolute and comparable across queries and collections; sparse (BM25) as raw divided by "
        "the best BM25 score of the same ranked list, so 1 is this search's best keyword match rather than a "
        "perfect one (in a federated search, the best over the merged collections). Null for every other "
        "signal"))


@strawberry.type(description="A planned query (from a pipeline's query stages) that found the hit, with its rank and score there.")
class QueryMatch:
    query: str = strawberry.field(description="The planned query's text")
    kind: str = strawberry.field(description="original, planner, paraphrase or hyde")
    rank: int = strawberry.field(description="The hit's 1-based rank among that query's results")
    score: float = strawberry.field(description="The hit's score among that query's results, higher is better")


@strawberry.type(description="Where a hit came from and how it was scored.")
class Provenance:
    tenant: str = strawberry.field(description="The tenant whose collection holds the hit: always the caller's")
    namespace: str = strawberry.field(description="The namespace of the collection the hit came from")
    collection: str = strawberry.field(description="The collection the hit came from")
    trust_tier: TrustTierEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "The trust tier of the hit's record: its collection's trust_tier, or a lower tier that the collection's "
        "trust_by rule gives the record's metadata value (CollectionInfo.trustByField; the collection's tier is "
        "the default and the ceiling)"))
    retriever: str = strawberry.field(description=(
        "What produced the hit: collection (one collection's search), federated (merged from several "
        "collections), expand (added as a neighbour by an expand stage), memory (a kind: memory collection), or "
        "custom:<module>:<function> (a custom retriever)"))
    mode: ModeEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "The mode the search really ran in that collection; it can differ from the one asked for (a hybrid query "
        "with no BM25 terms runs dense, and the trace warns)"))
    route: str | None = strawberry.field(description=(
        "How the collection was chosen, as '<router>:<route>'. router: explicit (the input named the "
        "collections), only-collection, default, or the name of the tenant router that matched; route: the "
        "collection as namespace/collection, 'collections' for an explicit list, or 'federated'. Null if no "
        "routing step recorded one"))
    scores: list[SignalScore] = strawberry.field(description=(
        "Every signal's raw score and rank for this hit: the retrieval signals, then those of later steps "
        "(federation, rerank, follow-up, memory scoring)"))
    fused_score: float | None = strawberry.field(description=(
        "The score fusion gave the hit when several lists were fused (a hybrid search, a federated merge, a "
        "pipeline's several queries); null when one list ranked it"))
    content_hash: str = strawberry.field(description=(
        "sha256 (64 hex digits) over the chunk's stored fields and the embedding model that indexed it: it "
        "changes exactly when re-ingesting changes the chunk"))
    ingested_at: datetime | None = strawberry.field(description=(
        "When the chunk was first written; null when the store kept no time for it"))
    updated_at: datetime | None = strawberry.field(description=(
        "When the chunk was last written; null when the store kept no time for it"))
    matched_queries: list[str] = strawberry.field(description=(
        "The texts of the planned queries (a pipeline's multiQuery, hyde or queryPlanner stages) that found the "
        "hit; empty when the search ran one query"))
    query_matches: list[QueryMatch] = strawberry.field(description=(
        "The same queries as matchedQueries, each with its kind and the hit's rank and score there"))
    original_chars: int | None = strawberry.field(
        description="Set when a compress stage cut the content: its length before, in characters.")
    via: str | None = strawberry.field(
        default=None, description="Set when an expand stage added the hit as a neighbour: 'link from <seed id>' or "
                                  "'similar to <seed id> (<cosine>)'.")
    page: int | None = strawberry.field(
        default=None, description="The 1-based PDF page the chunk was cut from (a chunk never spans two pages); "
                                  "null for other formats.")

    @classmethod
    def from_domain(cls, p: domain.Provenance, page: int | None = None) -> Provenance:
        return cls(tenant=p.tenant, namespace=p.namespace, collection=p.collection,
                   trust_tier=TrustTier(p.trust_tier), retriever=p.retriever, mode=Mode(p.mode), route=p.route,
                   scores=[SignalScore(signal=s.signal, raw=s.raw, rank=s.rank, normalized=s.normalized)
                           for s in p.scores],
                   fused_score=p.fused_score, content_hash=p.content_hash, ingested_at=p.ingested_at,
                   updated_at=p.updated_at, matched_queries=list(p.matched_queries),
                   query_matches=[QueryMatch(query=m.query, kind=m.kind, rank=m.rank, score=m.score)
                                  for m in p.query_matches],
                   original_chars=p.original_chars, via=p.via, page=page)


@strawberry.type(description="The parent record a chunk was cut from (for wider context).")
class Parent:
    parent_id: strawberry.ID = strawberry.field(description="namespace/collection/key. Not named `id` on purpose: "
                                                            "a parentExpand stage may cut the content per search, so "
                                                            "client caches keep a parent inside its hit")
    key: str = strawberry.field(description=(
        "The parent's key within its collection (SourceChunk.parentKey refers to it)"))
    source_id: str = strawberry.field(description="The source the parent was cut from")
    title: str | None = strawberry.field(description="The source's title; null when it has none")
    summary: str = strawberry.field(description=f"The parent's opening, at most {SUMMARY_CHARS} characters, cut at a sentence end where possible.")
    content: str = strawberry.field(description=(
        "The parent's text: a wider passage around the chunk, as stored or as a parentExpand stage cut it "
        "(maxParentChars)"))
    metadata: JSON = strawberry.field(description="The source's metadata object, as on its chunks")

    @classmethod
    def from_domain(cls, namespace: str, collection: str, record: ParentRecord) -> Parent:
        return cls.from_parent(namespace, collection, domain.Parent(
            key=record.key, source_id=record.source_id, title=record.title or None, content=record.text,
            metadata=record.metadata))

    @classmethod
    def from_parent(cls, namespace: str, collection: str, parent: domain.Parent) -> Parent:
        return cls(parent_id=strawberry.ID(f"{namespace}/{collection}/{parent.key}"), key=parent.key,
                   source_id=parent.source_id,
                   title=parent.title, summary=_summary(parent.content), content=parent.content,
                   metadata=dict(parent.metadata))


def chunk_id(namespace: str, collection: str, source_id: str, chunk: str) -> strawberry.ID:
    """`Chunk.id`: namespace/collection/sourceId/chunkId, unique across the tenant's collections."""
    return strawberry.ID(f"{namespace}/{collection}/{source_id}/{chunk}")


@strawberry.type(description=(
    "A stored chunk: what stays the same whichever search finds it, so a normalised client cache may share it "
    "between queries (its id is namespace/collection/sourceId/chunkId). What one search says about it (score, "
    "rank, provenance, the content as the search's pipeline cut it) is on SearchHit."))
class Chunk:
    id: strawberry.ID = strawberry.field(description="namespace/collection/sourceId/chunkId: unique across the "
                                                     "tenant's collections, and the id mutations report")
    namespace: str = strawberry.field(description="The namespace of the chunk's collection")
    collection: str = strawberry.field(description="The collection that stores the chunk")
    source_id: str = strawberry.field(description=(
        "The id of the document the chunk was cut from, as given at ingest (DocumentInput.sourceId, "
        "FileInput.sourceId or the file name)"))
    chunk_id: str = strawberry.field(description="The chunk's number within its source; cite as [sourceId/chunkId]")
    title: str | None = strawberry.field(description="The source's title; null when it has none")
    source_url: str | None = strawberry.field(description=(
        "The source's URL as given at ingest; null when none was given"))
    source_path: str | None = strawberry.field(description=(
        "The source's file path relative to the folder ingest was given (`guides/setup.md`), or the `path` a "
        "JSONL record or upsert gave; never the server's absolute path; null when there is none"))
    metadata: JSON = strawberry.field(description=(
        "The source's metadata object as ingested (PDF chunks add page); the keys the collection declares in "
        "metadataFields can be filtered on as metadata.<key>"))
    modality: ModalityEnum = strawberry.field(  # type: ignore[valid-type]
        description="TEXT, or IMAGE: the chunk is an image, the hit's `content` is its caption and "
                    "`sourcePath`/`sourceUrl` the file")


@strawberry.type(description=(
    "A word of the hit's content matching a term of the query, as BM25 analyses both (lowercase, no stop words, "
    "Snowball stems: 'refunds' matches a query's 'refunded'). Offsets count Unicode code points of the returned "
    "content (after compression): content[start:end] is the word."))
class HighlightSpan:
    start: int = strawberry.field(description="Offset of the word's first code point in SearchHit.content")
    end: int = strawberry.field(description="Offset just past the word's last code point (exclusive)")
    text: str = strawberry.field(description="The word as it is in the content: content[start:end]")
    term: str = strawberry.field(description="The query's BM25 term it matched (lowercased and stemmed)")


@strawberry.type(description=(
    "The sentence of the hit's content most similar to the query, for a hit no query term marks (found by its "
    "embedding, or by its title): the bundled embedder's cosine of the query and each of the first "
    f"{highlighting.MAX_SENTENCES} sentences (each read up to {highlighting.SENTENCE_CHARS} characters)."))
class HighlightSentence:
    start: int = strawberry.field(description="Offset of the sentence's first code point in SearchHit.content")
    end: int = strawberry.field(description="Offset just past its last code point (exclusive)")
    text: str = strawberry.field(description="The sentence: content[start:end]")
    score: float = strawberry.field(description="Its cosine similarity with the query (or the query vector)")


@strawberry.type(description="Why a hit matched, as spans of its returned content.")
class Highlights:
    spans: list[HighlightSpan] = strawberry.field(description=(
        f"The content's words matching the query's BM25 terms, in order (at most {highlighting.MAX_SPANS}); "
        "empty for a search by vector or image"))
    sentence: HighlightSentence | None = strawberry.field(description=(
        "Set only when spans is empty: the sentence most similar to the query; null when no text embedder is "
        "configured, the hit is an image, or the search had neither words nor a vector"))
    truncated: bool = strawberry.field(description=(
        f"True when more than {highlighting.MAX_SPANS} words matched and spans lists the first ones"))

    @classmethod
    def from_domain(cls, content: str, h: highlighting.Highlights) -> Highlights:
        sentence = None if h.sentence is None else HighlightSentence(
            start=h.sentence.start, end=h.sentence.end, text=content[h.sentence.start:h.sentence.end],
            score=h.sentence.score)
        return cls(spans=[HighlightSpan(start=s.start, end=s.end, text=content[s.start:s.end], term=s.term)
                          for s in h.spans], sentence=sentence, truncated=h.truncated)


@strawberry.type(description=(
    "One hit of one search: its rank and score there, the content as this search returned it, and the stored "
    "chunk. Deliberately has no id, so a client cache keeps it inside the result it came with."))
class SearchHit:
    rank: int = strawberry.field(description="1-based position in this search's ranked hits, across pages (with "
                                              "groupBy: in group order)")
    score: float = strawberry.field(description="This search's score, higher is better")
    content: str = strawberry.field(description="The chunk's text as this search returned it: a compress stage may "
                                                "have cut it (provenance.originalChars says so)")
    provenance: Provenance = strawberry.field(description="Where the hit came from and how this search scored it")
    chunk: Chunk = strawberry.field(description=(
        "The stored chunk the hit is, with its stable id (shared by every search that finds it)"))
    namespace: strawberry.Private[str]
    collection: strawberry.Private[str]
    parent_key: strawberry.Private[str | None]
    expanded: strawberry.Private[domain.Parent | None]
    highlighter: strawberry.Private[HighlightLoader | None] = None

    @strawberry.field(description=(
        "Why the hit matched: the content's words matching the query's BM25 terms (Unicode code-point offsets "
        "into `content` as returned), or for a hit without one its sentence most similar to the query. Computed "
        "only when selected, for the hits of the page, and counted in the request's cost (docs/operations.md)."))
    async def highlights(self) -> Highlights:
        if self.highlighter is None:
            raise RuntimeError("SearchHit.highlights needs the search's highlight loader")
        return Highlights.from_domain(self.content, await self.highlighter.load(self.rank - 1))

    @strawberry.field(description="The parent record, batched per request (as cut by a parentExpand stage, if one ran).")
    async def parent(self, info: Info[Context, None]) -> Parent | None:
        if self.expanded is not None:
            return Parent.from_parent(self.namespace, self.collection, self.expanded)
        if not self.parent_key:
            return None
        record = await info.context.parents.load((self.namespace, self.collection, self.parent_key))
        return Parent.from_domain(self.namespace, self.collection, record) if record else None

    @classmethod
    def from_domain(cls, h: domain.Hit, rank: int, highlighter: HighlightLoader | None = None) -> SearchHit:
        chunk = Chunk(id=chunk_id(h.namespace, h.collection, h.source_id, h.chunk_id), namespace=h.namespace,
                      collection=h.collection, source_id=h.source_id, chunk_id=h.chunk_id, title=h.title,
                      source_url=h.source_url, source_path=h.source_path, metadata=dict(h.metadata),
                      modality=Modality(h.modality))
        return cls(rank=rank, score=h.score, content=h.content, provenance=Provenance.from_domain(h.provenance, _page(h.metadata)),
                   chunk=chunk, namespace=h.namespace, collection=h.collection, parent_key=h.parent_key,
                   expanded=h.parent, highlighter=highlighter)


def ranked(hits: Sequence[domain.Hit], highlighter: HighlightLoader | None = None) -> list[SearchHit]:
    """`highlighter` loads a hit's highlights by its place in `hits` (graphql/highlights.py)."""
    return [SearchHit.from_domain(h, rank, highlighter) for rank, h in enumerate(hits, start=1)]


@strawberry.type(description=(
    "One step of a request (routing, retrieval, a pipeline stage, shaping): what went in, what came out, how long "
    "it took and what it noticed."))
class StageTrace:
    name: str = strawberry.field(description=(
        "The stage: route, retrieve:<namespace>/<collection>, federate, fanout, followUp, conversation, shape, or"
        " a pipeline stage's name (rerank, abstain, parentExpand, compress, diversify, expand, multiQuery, hyde, "
        "queryPlanner)"))
    phase: PhaseEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "The part of the request the stage belongs to"))
    status: StageStatusEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "Whether the stage ran, was skipped or failed"))
    duration_ms: float = strawberry.field(description="How long the stage took, in milliseconds")
    input_count: int = strawberry.field(description=(
        "How many items the stage received: hits, queries or collections, depending on the stage"))
    output_count: int = strawberry.field(description="How many items the stage produced")
    warnings: list[str] = strawberry.field(description=(
        "Where the stage ran differently from what was asked, or why it was skipped"))
    preview: list[str] = strawberry.field(description="At most 5 queries or hits, each cut to 200 characters.")
    detail: JSON = strawberry.field(description=(
        "A JSON object of facts particular to the stage, e.g. route: router, matched, route; federate: merge, "
        "per-collection hit counts, failed collections; rerank: its chain. Keys differ per stage"))

    @classmethod
    def from_domain(cls, s: tracing.StageTrace) -> StageTrace:
        return cls(name=s.name, phase=s.phase, status=s.status, duration_ms=s.duration_ms,
                   input_count=s.input_count, output_count=s.output_count, warnings=list(s.warnings),
                   preview=list(s.preview), detail=dict(s.detail))


@strawberry.type(description="What the request did, stage by stage; traceId is the OpenTelemetry trace id.")
class Trace:
    trace_id: str = strawberry.field(description=(
        "The request's OpenTelemetry trace id (32 hex digits), to find its spans in a tracing backend"))
    duration_ms: float = strawberry.field(description="How long the request's search took, in milliseconds")
    stages: list[StageTrace] = strawberry.field(description="One record per stage, in the order the stages ran")
    warnings: list[str] = strawberry.field(description=(
        "Where the request as a whole ran differently from what was asked (an ignored parameter, a collection "
        "left out of a federated result); each stage's own warnings are on the stage too"))

    @classmethod
    def from_domain(cls, t: tracing.Trace) -> Trace:
        return cls(trace_id=t.trace_id, duration_ms=t.duration_ms,
                   stages=[StageTrace.from_domain(s) for s in t.stages], warnings=list(t.warnings))


@strawberry.type(description="One source's hits in a search with groupBy: SOURCE, best first.")
class SearchGroup:
    rank: int = strawberry.field(description="1-based position among the search's groups (across pages)")
    score: float = strawberry.field(description=(
        "The score of the group's first hit: its best, unless `sort` ordered the hits by a property"))
    namespace: str = strawberry.field(description="The namespace of the group's source")
    collection: str = strawberry.field(description="The collection of the group's source")
    source_id: str = strawberry.field(description="The id of the group's source")
    hits: list[SearchHit] = strawberry.field(description="At most hitsPerGroup hits of this source, best first")


@strawberry.type(description="Where a page of a search ends. Pass endCursor as `after` (with the same input) for "
                             "the next page.")
class PageInfo:
    has_next_page: bool = strawberry.field(description=(
        "True when ranked hits (with groupBy: groups) follow this page"))
    has_previous_page: bool = strawberry.field(description=(
        "True when this page does not start at the first ranked hit (or group)"))
    end_cursor: str | None = strawberry.field(description="Opaque; valid only for the same input and caller")


@strawberry.type(description="One bucket of a facet: a value, or a range, and how many counted hits fall in it.")
class FacetBucket:
    label: str = strawberry.field(description=(
        "The value as text (namespace/collection for collection), or the range: 11-20 (pages), '0 to 10' "
        "(numbers, [0, 10)), 2026-11 (a month), 2026-11-23 (a day, or the Monday of a week), 2026 (a year)"))
    count: int = strawberry.field(description="Counted hits with this value (or in this range)")
    value: JSON | None = strawberry.field(description=(
        "The value as stored (a string, number or boolean), to filter on; null for a range bucket"))
    start: float | None = strawberry.field(description=(
        "A range bucket's inclusive start: a number, a page, or a date in epoch milliseconds (as filters on "
        "created_at and updated_at take it); null for a value bucket"))
    end: float | None = strawberry.field(description="A range bucket's exclusive end, as `start`; null for a value")


@strawberry.type(description="The counts of one facet.")
class Facet:
    field: str = strawberry.field(description="The property counted, as FacetInput.field named it")
    buckets: list[FacetBucket] = strawberry.field(description=(
        "At most FacetInput.size buckets: values with the most hits first (ties by value), or ranges in order "
        "(the fullest kept)"))
    other: int = strawberry.field(description="Counts of the values or ranges past `size`, summed")
    missing: int = strawberry.field(description="Counted hits without a value for the property")


@strawberry.type(description=(
    "Facets over the search's matches: the first `depth` hits of the same retrieval (its collections, mode, filter "
    "and threshold, without pipeline stages, autocut or grouping), not only the returned page."))
class Facets:
    depth: int = strawberry.field(description="The most hits counted (SearchInput.facetDepth)")
    counted: int = strawberry.field(description="Hits counted")
    complete: bool = strawberry.field(description=(
        "True when fewer than `depth` hits matched, so every match of the filtered search was counted; false "
        "means the counts cover its best `depth` matches (a dense search matches every row)"))
    fields: list[Facet] = strawberry.field(description="One facet per FacetInput, in the order asked")

    @classmethod
    def from_domain(cls, counts: faceting.FacetCounts) -> Facets:
        return cls(depth=counts.depth, counted=counts.counted, complete=counts.complete, fields=[
            Facet(field=f.field, other=f.other, missing=f.missing, buckets=[
                FacetBucket(label=b.label, count=b.count, value=b.value, start=b.start, end=b.end)
                for b in f.buckets]) for f in counts.facets])


@strawberry.type(description="A page of one search's ranked hits, and what the search did.")
class SearchResult:
    hits: list[SearchHit] = strawberry.field(description="This page's hits, best first (with groupBy, the page's "
                                                         "groups' hits in group order)")
    groups: list[SearchGroup] | None = strawberry.field(description="This page's groups; null unless groupBy is set")
    total_count: int = strawberry.field(description="Ranked hits (with groupBy: groups) across all pages, after "
                                                    "autocut; at most the input's limit")
    page_info: PageInfo = strawberry.field(description="Where this page ends and whether more follow")
    abstained: bool = strawberry.field(description=(
        "True when an `abstain` stage judged the evidence too weak and returned no hits; trace.warnings says "
        "why. An empty result that is not an abstention also has its reason in trace.warnings"))
    trace: Trace = strawberry.field(description=(
        "What the search did, stage by stage (for all pages, not only this one)"))
    facets: Facets | None = strawberry.field(default=None, description=(
        "The counts SearchInput.facets asked for, over the search's matches (not only this page); null without "
        "facets"))


@strawberry.type(description="Hits rendered as a prompt block under '## Retrieved Context (<query>)', one line a "
                             "hit: '- [<sourceId>/<chunkId>] (<namespace>/<collection> · rank N · score S) <content>'.")
class ContextResult:
    text: str = strawberry.field(description=(
        "The rendered block: the header line, then one line per hit that fits the maxChars/maxTokens budget "
        "(never longer than it), and a last line saying how many hits were left out, if any"))
    left_out: int = strawberry.field(description="Hits of `hits` with no line in the block (the budget ran out)")
    shortened: int = strawberry.field(description="Hits whose content was cut at a word to fit the budget")
    hits: list[SearchHit] = strawberry.field(description="The hits the block was rendered from, best first")
    trace: Trace = strawberry.field(description="What the search did, stage by stage")
    facets: Facets | None = strawberry.field(default=None, description=(
        "The counts SearchInput.facets asked for, as SearchResult.facets; null without facets"))


@strawberry.type(description="A collection the caller's tenant may search, with the defaults its configuration sets.")
class CollectionInfo:
    namespace: str = strawberry.field(description="The collection's namespace")
    name: str = strawberry.field(description=(
        "The collection's name, unique within its namespace (what SearchInput.collection takes)"))
    description: str = strawberry.field(description=(
        "What the collection holds, from the tenant's configuration; empty when not configured"))
    trust_tier: TrustTierEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "How far the collection's content can be trusted"))
    mode: ModeEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "The mode a search of the collection runs when the input sets none"))
    fusion: FusionEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "The fusion a hybrid search of the collection uses when the input sets none"))
    default_limit: int = strawberry.field(description=(
        "How many hits a search of the collection returns when the input sets no limit"))
    metadata_fields: list[str] = strawberry.field(description="The metadata keys a filter may use, as metadata.<key>")
    chunk_count: int = strawberry.field(description="Chunks stored in the collection now (0 before its first ingest)")
    dimension: int | None = strawberry.field(default=None, description=(
        "The size of the collection's dense vectors: what DocumentInput.vector, ChunkInput.vector and "
        "SearchInput.vector must have; null when the gateway has no encoder for it (no dense search)"))
    trust_by_field: str | None = strawberry.field(default=None, description=(
        "The metadata key whose value sets each record's trust tier (tenant file trust_by), at or below "
        "trustTier; null when every record has the collection's trustTier"))
    embedded_fields: list[str] = strawberry.field(default_factory=lambda: ["title", "content"], description=(
        "What each chunk's dense vector is computed from, in order (tenant file content_keys.embed): title, "
        "content (the chunk's text) or metadata.<key>"))
    indexed_fields: list[str] = strawberry.field(default_factory=lambda: ["title", "content"], description=(
        "What BM25 indexes for each chunk, in order (tenant file content_keys.index): title, content or "
        "metadata.<key>"))
    language: str = strawberry.field(default="en", description=(
        "How BM25 analyses the collection's text and queries: en, de, fr, es, it, nl, pt, sv or ru (that "
        "language's stop words and Snowball stemmer), or none (lowercased words only, for ids and codes)"))

    @classmethod
    def from_domain(cls, ref: CollectionRef, chunk_count: int, dimension: int | None = None) -> CollectionInfo:
        c = ref.config
        return cls(namespace=ref.scope.namespace, name=ref.scope.collection, description=c.description,
                   trust_tier=c.trust_tier, mode=c.mode, fusion=c.fusion, default_limit=c.limit,
                   metadata_fields=list(c.metadata_fields), chunk_count=chunk_count, dimension=dimension,
                   trust_by_field=c.trust_by.field if c.trust_by is not None else None,
                   embedded_fields=list(c.content_keys.embed), indexed_fields=list(c.content_keys.index),
                   language=c.language.value)


@strawberry.type(description="A stored chunk of a source, in order.")
class SourceChunk:
    chunk_id: str = strawberry.field(description="The chunk's number within its source; cite as [sourceId/chunkId]")
    content: str = strawberry.field(description="The chunk's stored text")
    content_hash: str = strawberry.field(description=(
        "sha256 (64 hex digits) over the chunk's stored fields and the embedding model that indexed it"))
    parent_key: str = strawberry.field(description=(
        "The key of the parent record the chunk was cut from (Parent.key); empty when it has none"))
    updated_at: datetime | None = strawberry.field(description=(
        "When the chunk was last written; null when the store kept no time for it"))
    page: int | None = strawberry.field(default=None, description="The 1-based PDF page the chunk is on "
                                                                     "(its metadata.page); null for other formats.")

    @classmethod
    def from_domain(cls, c: StoredChunk) -> SourceChunk:
        page = c.metadata.get("page")
        return cls(chunk_id=c.chunk_id, content=c.text, content_hash=c.content_hash, parent_key=c.parent_key,
                   updated_at=epoch_ms_to_datetime(c.updated_at),
                   page=page if isinstance(page, int) and not isinstance(page, bool) else None)


@strawberry.type(description="All chunks of one source, for a citation UI.")
class Source:
    namespace: str = strawberry.field(description="The namespace of the collection the source was found in")
    collection: str = strawberry.field(description="The collection the source was found in")
    source_id: str = strawberry.field(description="The source's id")
    title: str | None = strawberry.field(description="The source's title; null when it has none")
    source_url: str | None = strawberry.field(description=(
        "The source's URL as given at ingest; null when none was given"))
    source_path: str | None = strawberry.field(description=(
        "The source's file path relative to the folder ingest was given (`guides/setup.md`), or the `path` a "
        "JSONL record or upsert gave; never the server's absolute path; null when there is none"))
    metadata: JSON = strawberry.field(description="The source's metadata object, as stored on its chunks")
    chunks: list[SourceChunk] = strawberry.field(description="Every stored chunk of the source, in chunk order")


@strawberry.type(description="What an upsert wrote. chunkIds and deletedChunkIds use Chunk.id, so a client cache "
                             "can evict or refetch exactly those chunks.")
class UpsertResult:
    sources: int = strawberry.field(description="Documents in the call")
    chunks: int = strawberry.field(description="Chunks the documents were cut into")
    chunks_written: int = strawberry.field(description="Chunks embedded and written because they are new or changed")
    chunks_unchanged: int = strawberry.field(description=(
        "Chunks whose content hash was already stored: neither embedded nor written again"))
    chunks_deleted: int = strawberry.field(description="Chunks removed because their source no longer has them")
    chunk_ids: list[strawberry.ID] = strawberry.field(description="Chunk.id of every chunk written (new or changed)")
    deleted_chunk_ids: list[strawberry.ID] = strawberry.field(
        description="Chunk.id of every chunk removed because its source no longer has it")

    @classmethod
    def from_domain(cls, namespace: str, collection: str, r: IngestReport) -> UpsertResult:
        return cls(sources=r.sources, chunks=r.chunks, chunks_written=r.chunks_written,
                   chunks_unchanged=r.chunks_unchanged, chunks_deleted=r.chunks_deleted,
                   chunk_ids=[chunk_id(namespace, collection, s, c) for s, c in r.written],
                   deleted_chunk_ids=[chunk_id(namespace, collection, s, c) for s, c in r.deleted])


@strawberry.type(description="What deleteSource removed; chunkIds use Chunk.id, for client cache eviction.")
class DeleteResult:
    source_id: str = strawberry.field(description="The source that was deleted")
    chunks_deleted: int = strawberry.field(description="How many chunks were deleted")
    chunk_ids: list[strawberry.ID] = strawberry.field(description="Chunk.id of every chunk deleted")


@strawberry.type(description="What deleteSources removed: one entry per deleted source, and the ids that had no chunk.")
class DeleteSourcesResult:
    deleted: list[DeleteResult] = strawberry.field(description="Each deleted source with its chunk ids, in request order")
    missing: list[str] = strawberry.field(description="Source ids the collection had no chunk of; nothing of them was left")


def _summary(text: str) -> str:
    if len(text) <= SUMMARY_CHARS:
        return text
    cut = text[:SUMMARY_CHARS]
    end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
    return cut[:end + 1] if end > SUMMARY_CHARS // 3 else cut.rstrip() + "…"





@strawberry.type(description="The support check of one citation: the cross-encoder's score and the thresholds "
                                    "that turned it into a verdict.")
class SupportCheck:
    verdict: SupportVerdictEnum = strawberry.field(  # type: ignore[valid-type]
        description="SUPPORTED, WEAK or UNSUPPORTED")
    score: float = strawberry.field(description=(
        "The cross-encoder's logit on (the sentence without its markers, the cited chunk's content); higher is "
        "better supported"))
    supported_at: float = strawberry.field(description="Scores at or above this are SUPPORTED")
    weak_at: float = strawberry.field(description="Scores below this are UNSUPPORTED; between the two, WEAK")

    @classmethod
    def from_domain(cls, check: citations.SupportCheck | None) -> SupportCheck | None:
        if check is None:
            return None
        return cls(verdict=check.verdict, score=check.score, supported_at=check.thresholds.supported_at,
                   weak_at=check.thresholds.weak_at)


@strawberry.type(description="One [sourceId/chunkId] marker of an answer and what validation found.")
class CitationCheck:
    marker: str = strawberry.field(description="The marker as written in the answer, e.g. [refunds/3]")
    source_id: str = strawberry.field(description="The source id the marker names")
    chunk_id: str = strawberry.field(description="The chunk id the marker names")
    status: CitationStatusEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "Whether the citation is valid, unknown or misquoted"))
    sentence: int = strawberry.field(description="0-based index of the sentence it is in")
    quote: str | None = strawberry.field(description="the quoted span right before the marker, if any")
    support: SupportCheck | None = strawberry.field(description=(
        "Whether the cited chunk backs the sentence; null when support was not asked for, the citation is not "
        "VALID, or it was past the per-call bound (CitationReport.unchecked)"))


@strawberry.type(description="A sentence of the answer that cites nothing (reported when required: true).")
class UncitedSentence:
    index: int = strawberry.field(description="0-based index of the sentence in the answer")
    text: str = strawberry.field(description="The sentence as written")


@strawberry.type(description="Whether an answer cites only its evidence, and quotes it truly.")
class CitationReport:
    valid: bool = strawberry.field(description=(
        "True when every marker is VALID, no citation's support is UNSUPPORTED and (with required: true) every "
        "sentence cites something; an answer without markers is valid unless required is true"))
    citations: list[CitationCheck] = strawberry.field(description="Every marker of the answer, in the order written")
    uncited_sentences: list[UncitedSentence] = strawberry.field(description=(
        "The sentences that cite nothing; always empty unless required: true"))
    unchecked: int = strawberry.field(description=(
        f"VALID citations whose support was not checked: each call scores at most {MAX_CHECKS} (sentence, chunk) "
        "pairs, in the order written; 0 when support is false"))

    @classmethod
    def from_domain(cls, report: citations.CitationReport) -> CitationReport:
        return cls(valid=report.valid,
                   citations=[CitationCheck(marker=c.marker, source_id=c.source_id, chunk_id=c.chunk_id,
                                            status=c.status, sentence=c.sentence, quote=c.quote,
                                            support=SupportCheck.from_domain(c.support))
                              for c in report.citations],
                   uncited_sentences=[UncitedSentence(index=s.index, text=s.text) for s in report.uncited],
                   unchecked=report.unchecked)


@strawberry.type(description="One recorded search of a conversation.")
class ConversationTurn:
    turn: int = strawberry.field(description="1-based number within the conversation")
    query: str = strawberry.field(description="The query as the client sent it")
    resolved_query: str = strawberry.field(description="What was searched: the query, or its follow-up resolution")
    resolved_from: int | None = strawberry.field(description="The turn whose query resolved this one, if any")
    hit_ids: list[str] = strawberry.field(description="Qualified ids (namespace/collection/sourceId/chunkId) of the "
                                                      "hits returned, best first")
    created_at: datetime = strawberry.field(description="When the turn was recorded")
    expires_at: datetime = strawberry.field(description=(
        "When the turn expires: after it, the turn is neither returned nor used to resolve follow-ups"))

    @classmethod
    def from_domain(cls, t: Turn) -> ConversationTurn:
        return cls(turn=t.turn, query=t.query, resolved_query=t.resolved_query,
                   resolved_from=t.resolved_from or None, hit_ids=list(t.hits),
                   created_at=epoch_ms_to_datetime(t.created_at),  # type: ignore[arg-type]
                   expires_at=epoch_ms_to_datetime(t.expires_at))  # type: ignore[arg-type]


@strawberry.type(description="The live (unexpired) turns of one of the caller's conversations, oldest first.")
class Conversation:
    id: str = strawberry.field(description=(
        "The conversation's id, as the searches passed it in SearchInput.conversationId"))
    turns: list[ConversationTurn] = strawberry.field(description="The live turns, oldest first")


@strawberry.type(description="What clearConversation deleted.")
class ClearedConversation:
    id: str = strawberry.field(description="The conversation's id")
    turns_deleted: int = strawberry.field(description="How many turns were deleted (0 when it had none)")


@strawberry.type(description="A memory as stored: search its collection to recall it.")
class MemoryEntry:
    id: str = strawberry.field(description="Its sourceId in the memory collection")
    namespace: str = strawberry.field(description="The namespace of the memory collection")
    collection: str = strawberry.field(description="The memory collection that stores it")
    content: str = strawberry.field(description="The memory's text")
    user_id: str = strawberry.field(description="Whose memory it is (metadata.user_id, to filter on)")
    memory_type: str = strawberry.field(description=(
        "Its type, one of the collection's memory types (metadata.memory_type)"))
    importance: float = strawberry.field(description=(
        "0 to 1: how much the memory weighs in recall (gamma * importance)"))
    created_at: datetime = strawberry.field(description="When it was stored; recall's recency decays from this time")

    @classmethod
    def from_domain(cls, m: Memory) -> MemoryEntry:
        return cls(id=m.id, namespace=m.namespace, collection=m.collection, content=m.content, user_id=m.user_id,
                   memory_type=m.memory_type, importance=m.importance,
                   created_at=epoch_ms_to_datetime(m.created_at))  # type: ignore[arg-type]


def _page(metadata: Mapping[str, Any]) -> int | None:
    """A PDF chunk's page (ingest writes it to metadata.page; gateway/ingest/formats.py)."""
    page = metadata.get("page")
    return page if isinstance(page, int) and not isinstance(page, bool) else None
