"""GraphQL output types, converted from domain values at the edge."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from gateway.graphql.context import Context
from gateway.conversations.memory import Memory
from gateway.conversations.turns import Turn
from gateway.embedding.base import Modality
from gateway.grounding import citations
from gateway.grounding.citations import CitationStatus
from gateway.ingest.sync import IngestReport
from gateway.retrieval import hit as domain
from gateway.retrieval import trace as tracing
from gateway.retrieval.options import Fusion, Mode
from gateway.retrieval.retrievers import epoch_ms_to_datetime
from gateway.storage.milvus import ParentRecord, StoredChunk
from gateway.tenancy.config import TrustTier
from gateway.tenancy.registry import CollectionRef

ModeEnum = strawberry.enum(Mode, name="Mode", description="dense (embeddings), sparse (BM25) or hybrid (both, fused)")
FusionEnum = strawberry.enum(Fusion, name="Fusion", description="rrf: reciprocal rank; dbsf: mean +- 3 sigma; weighted: min-max, alpha")
TrustTierEnum = strawberry.enum(TrustTier, name="TrustTier")
ModalityEnum = strawberry.enum(Modality, name="Modality", description="what a hit's vector was computed from")
PhaseEnum = strawberry.enum(tracing.Phase, name="Phase")
StageStatusEnum = strawberry.enum(tracing.StageStatus, name="StageStatus")

SUMMARY_CHARS = 300


@strawberry.type(description="One signal's raw score (higher is better) and 1-based rank for a hit.")
class SignalScore:
    signal: str
    raw: float
    rank: int


@strawberry.type(description="A planned query (from a pipeline's query stages) that found the hit, with its rank and score there.")
class QueryMatch:
    query: str
    kind: str = strawberry.field(description="original, planner, paraphrase or hyde")
    rank: int
    score: float


@strawberry.type(description="Where a hit came from and how it was scored.")
class Provenance:
    tenant: str
    namespace: str
    collection: str
    trust_tier: TrustTierEnum  # type: ignore[valid-type]
    retriever: str
    mode: ModeEnum  # type: ignore[valid-type]
    route: str | None
    scores: list[SignalScore]
    fused_score: float | None
    content_hash: str
    ingested_at: datetime | None
    updated_at: datetime | None
    matched_queries: list[str]
    query_matches: list[QueryMatch]
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
                   scores=[SignalScore(signal=s.signal, raw=s.raw, rank=s.rank) for s in p.scores],
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
    key: str
    source_id: str
    title: str | None
    summary: str = strawberry.field(description=f"The parent's opening, at most {SUMMARY_CHARS} characters, cut at a sentence end where possible.")
    content: str
    metadata: JSON

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
    namespace: str
    collection: str
    source_id: str
    chunk_id: str = strawberry.field(description="The chunk's number within its source; cite as [sourceId/chunkId]")
    title: str | None
    source_url: str | None
    source_path: str | None
    metadata: JSON
    modality: ModalityEnum = strawberry.field(  # type: ignore[valid-type]
        description="TEXT, or IMAGE: the chunk is an image, the hit's `content` is its caption and "
                    "`sourcePath`/`sourceUrl` the file")


@strawberry.type(description=(
    "One hit of one search: its rank and score there, the content as this search returned it, and the stored "
    "chunk. Deliberately has no id, so a client cache keeps it inside the result it came with."))
class SearchHit:
    rank: int = strawberry.field(description="1-based position in this search's ranked hits, across pages (with "
                                              "groupBy: in group order)")
    score: float = strawberry.field(description="This search's score, higher is better")
    content: str = strawberry.field(description="The chunk's text as this search returned it: a compress stage may "
                                                "have cut it (provenance.originalChars says so)")
    provenance: Provenance
    chunk: Chunk
    namespace: strawberry.Private[str]
    collection: strawberry.Private[str]
    parent_key: strawberry.Private[str | None]
    expanded: strawberry.Private[domain.Parent | None]

    @strawberry.field(description="The parent record, batched per request (as cut by a parentExpand stage, if one ran).")
    async def parent(self, info: Info[Context, None]) -> Parent | None:
        if self.expanded is not None:
            return Parent.from_parent(self.namespace, self.collection, self.expanded)
        if not self.parent_key:
            return None
        record = await info.context.parents.load((self.namespace, self.collection, self.parent_key))
        return Parent.from_domain(self.namespace, self.collection, record) if record else None

    @classmethod
    def from_domain(cls, h: domain.Hit, rank: int) -> SearchHit:
        chunk = Chunk(id=chunk_id(h.namespace, h.collection, h.source_id, h.chunk_id), namespace=h.namespace,
                      collection=h.collection, source_id=h.source_id, chunk_id=h.chunk_id, title=h.title,
                      source_url=h.source_url, source_path=h.source_path, metadata=dict(h.metadata),
                      modality=Modality(h.modality))
        return cls(rank=rank, score=h.score, content=h.content, provenance=Provenance.from_domain(h.provenance, _page(h.metadata)),
                   chunk=chunk, namespace=h.namespace, collection=h.collection, parent_key=h.parent_key,
                   expanded=h.parent)


def ranked(hits: Sequence[domain.Hit]) -> list[SearchHit]:
    return [SearchHit.from_domain(h, rank) for rank, h in enumerate(hits, start=1)]


@strawberry.type
class StageTrace:
    name: str
    phase: PhaseEnum  # type: ignore[valid-type]
    status: StageStatusEnum  # type: ignore[valid-type]
    duration_ms: float
    input_count: int
    output_count: int
    warnings: list[str]
    preview: list[str] = strawberry.field(description="At most 5 queries or hits, each cut to 200 characters.")
    detail: JSON

    @classmethod
    def from_domain(cls, s: tracing.StageTrace) -> StageTrace:
        return cls(name=s.name, phase=s.phase, status=s.status, duration_ms=s.duration_ms,
                   input_count=s.input_count, output_count=s.output_count, warnings=list(s.warnings),
                   preview=list(s.preview), detail=dict(s.detail))


@strawberry.type(description="What the request did, stage by stage; traceId is the OpenTelemetry trace id.")
class Trace:
    trace_id: str
    duration_ms: float
    stages: list[StageTrace]
    warnings: list[str]

    @classmethod
    def from_domain(cls, t: tracing.Trace) -> Trace:
        return cls(trace_id=t.trace_id, duration_ms=t.duration_ms,
                   stages=[StageTrace.from_domain(s) for s in t.stages], warnings=list(t.warnings))


@strawberry.type(description="One source's hits in a search with groupBy: SOURCE, best first.")
class SearchGroup:
    rank: int = strawberry.field(description="1-based position among the search's groups (across pages)")
    score: float = strawberry.field(description="The score of the group's best hit")
    namespace: str
    collection: str
    source_id: str
    hits: list[SearchHit] = strawberry.field(description="At most hitsPerGroup hits of this source, best first")


@strawberry.type(description="Where a page of a search ends. Pass endCursor as `after` (with the same input) for "
                             "the next page.")
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    end_cursor: str | None = strawberry.field(description="Opaque; valid only for the same input and caller")


@strawberry.type(description="A page of one search's ranked hits, and what the search did.")
class SearchResult:
    hits: list[SearchHit] = strawberry.field(description="This page's hits, best first (with groupBy, the page's "
                                                         "groups' hits in group order)")
    groups: list[SearchGroup] | None = strawberry.field(description="This page's groups; null unless groupBy is set")
    total_count: int = strawberry.field(description="Ranked hits (with groupBy: groups) across all pages, after "
                                                    "autocut; at most the input's limit")
    page_info: PageInfo
    trace: Trace


@strawberry.type(description="Hits rendered as a prompt block under '## Retrieved Context (<query>)', one line a "
                             "hit: '- [<sourceId>/<chunkId>] (<namespace>/<collection> · rank N · score S) <content>'.")
class ContextResult:
    text: str
    hits: list[SearchHit]
    trace: Trace


@strawberry.type
class CollectionInfo:
    namespace: str
    name: str
    description: str
    trust_tier: TrustTierEnum  # type: ignore[valid-type]
    mode: ModeEnum  # type: ignore[valid-type]
    fusion: FusionEnum  # type: ignore[valid-type]
    default_limit: int
    metadata_fields: list[str]
    chunk_count: int

    @classmethod
    def from_domain(cls, ref: CollectionRef, chunk_count: int) -> CollectionInfo:
        c = ref.config
        return cls(namespace=ref.scope.namespace, name=ref.scope.collection, description=c.description,
                   trust_tier=c.trust_tier, mode=c.mode, fusion=c.fusion, default_limit=c.limit,
                   metadata_fields=list(c.metadata_fields), chunk_count=chunk_count)


@strawberry.type(description="A stored chunk of a source, in order.")
class SourceChunk:
    chunk_id: str
    content: str
    content_hash: str
    parent_key: str
    updated_at: datetime | None
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
    namespace: str
    collection: str
    source_id: str
    title: str | None
    source_url: str | None
    source_path: str | None
    metadata: JSON
    chunks: list[SourceChunk]


@strawberry.type(description="What an upsert wrote. chunkIds and deletedChunkIds use Chunk.id, so a client cache "
                             "can evict or refetch exactly those chunks.")
class UpsertResult:
    sources: int
    chunks: int
    chunks_written: int
    chunks_unchanged: int
    chunks_deleted: int
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
    source_id: str
    chunks_deleted: int
    chunk_ids: list[strawberry.ID] = strawberry.field(description="Chunk.id of every chunk deleted")


def _summary(text: str) -> str:
    if len(text) <= SUMMARY_CHARS:
        return text
    cut = text[:SUMMARY_CHARS]
    end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
    return cut[:end + 1] if end > SUMMARY_CHARS // 3 else cut.rstrip() + "…"



CitationStatusEnum = strawberry.enum(CitationStatus, name="CitationStatus",
                                     description="valid; unknown: not in the evidence; misquoted: the quote is not in the chunk")


@strawberry.type(description="One [sourceId/chunkId] marker of an answer and what validation found.")
class CitationCheck:
    marker: str
    source_id: str
    chunk_id: str
    status: CitationStatusEnum  # type: ignore[valid-type]
    sentence: int = strawberry.field(description="0-based index of the sentence it is in")
    quote: str | None = strawberry.field(description="the quoted span right before the marker, if any")


@strawberry.type(description="A sentence of the answer that cites nothing (reported when required: true).")
class UncitedSentence:
    index: int
    text: str


@strawberry.type(description="Whether an answer cites only its evidence, and quotes it truly.")
class CitationReport:
    valid: bool
    citations: list[CitationCheck]
    uncited_sentences: list[UncitedSentence]

    @classmethod
    def from_domain(cls, report: citations.CitationReport) -> CitationReport:
        return cls(valid=report.valid,
                   citations=[CitationCheck(marker=c.marker, source_id=c.source_id, chunk_id=c.chunk_id,
                                            status=c.status, sentence=c.sentence, quote=c.quote)
                              for c in report.citations],
                   uncited_sentences=[UncitedSentence(index=s.index, text=s.text) for s in report.uncited])


@strawberry.type(description="One recorded search of a conversation.")
class ConversationTurn:
    turn: int = strawberry.field(description="1-based number within the conversation")
    query: str
    resolved_query: str = strawberry.field(description="What was searched: the query, or its follow-up resolution")
    resolved_from: int | None = strawberry.field(description="The turn whose query resolved this one, if any")
    hit_ids: list[str] = strawberry.field(description="Qualified ids (namespace/collection/sourceId/chunkId) of the "
                                                      "hits returned, best first")
    created_at: datetime
    expires_at: datetime

    @classmethod
    def from_domain(cls, t: Turn) -> ConversationTurn:
        return cls(turn=t.turn, query=t.query, resolved_query=t.resolved_query,
                   resolved_from=t.resolved_from or None, hit_ids=list(t.hits),
                   created_at=epoch_ms_to_datetime(t.created_at),  # type: ignore[arg-type]
                   expires_at=epoch_ms_to_datetime(t.expires_at))  # type: ignore[arg-type]


@strawberry.type(description="The live (unexpired) turns of one of the caller's conversations, oldest first.")
class Conversation:
    id: str
    turns: list[ConversationTurn]


@strawberry.type
class ClearedConversation:
    id: str
    turns_deleted: int


@strawberry.type(description="A memory as stored: search its collection to recall it.")
class MemoryEntry:
    id: str = strawberry.field(description="Its sourceId in the memory collection")
    namespace: str
    collection: str
    content: str
    user_id: str
    memory_type: str
    importance: float
    created_at: datetime

    @classmethod
    def from_domain(cls, m: Memory) -> MemoryEntry:
        return cls(id=m.id, namespace=m.namespace, collection=m.collection, content=m.content, user_id=m.user_id,
                   memory_type=m.memory_type, importance=m.importance,
                   created_at=epoch_ms_to_datetime(m.created_at))  # type: ignore[arg-type]


def _page(metadata: Mapping[str, Any]) -> int | None:
    """A PDF chunk's page (ingest writes it to metadata.page; gateway/ingest/formats.py)."""
    page = metadata.get("page")
    return page if isinstance(page, int) and not isinstance(page, bool) else None
