"""The Strawberry schema: thin resolvers that parse, delegate and map."""

from __future__ import annotations

import dataclasses

import strawberry
from strawberry.scalars import JSON
from strawberry.extensions import MaxTokensLimiter
from strawberry.types import Info

from gateway.graphql.context import Context
from gateway.graphql.documents import cached_documents, document_cache
from gateway.graphql.errors import DomainErrors, GatewaySchema, PartialFailures
from gateway.graphql.inputs import DocumentInput, EvidenceInput, FilterInput
from gateway.graphql.selection import stored_fields
from gateway.graphql.types import (
    CitationReport,
    ClearedConversation,
    CollectionInfo,
    ContextResult,
    Conversation,
    ConversationTurn,
    DeleteResult,
    FusionEnum,
    Hit,
    MemoryEntry,
    ModeEnum,
    SearchResult,
    Source,
    SourceChunk,
    Trace,
    UpsertResult,
)
from gateway.embedding.images import MAX_QUERY_IMAGE_BYTES, decode_base64_image, open_image
from gateway.errors import InvalidInput
from gateway.grounding.citations import validate_citations
from gateway.grounding.context import render_context
from gateway.routing.searcher import SearchRequest
from gateway.routing.searcher import SearchResult as SearchResult_
from gateway.settings import Settings


def _request(query: str, namespace: str | None, collection: str | None, mode, limit: int | None,
             threshold: float | None, filter: FilterInput | None, fusion, alpha: float | None,
             collections: list[str] | None, namespaces: list[str] | None, federated: bool,
             metadata: JSON | None, pipeline: str | None, conversation_id: str | None = None,
             image: str | None = None) -> SearchRequest:
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidInput(f"metadata must be a JSON object, got {type(metadata).__name__}")
    decoded = (open_image(decode_base64_image(image), where="query image", max_bytes=MAX_QUERY_IMAGE_BYTES)
               if image is not None else None)
    return SearchRequest(query=query, namespace=namespace, collection=collection, mode=mode, limit=limit,
                         threshold=threshold, filter=filter.to_domain() if filter else None, fusion=fusion,
                         alpha=alpha, collections=tuple(collections) if collections else None,
                         namespaces=tuple(namespaces) if namespaces else None, federated=federated,
                         metadata=dict(metadata or {}), pipeline=pipeline, conversation_id=conversation_id,
                         image=decoded)


def _report_failures(info: Info[Context, None], result: SearchResult_) -> None:
    info.context.partial_failures.extend(
        {"collection": f.collection, "reason": f.reason, "code": f.code} for f in result.failures)


@strawberry.type
class Query:
    @strawberry.field(description=(
        "Find evidence for a query in the caller's collections. `collection` or `collections` choose "
        "explicitly; `federated: true` searches every collection (optionally only in `namespaces`); "
        "otherwise the tenant's routers decide, using `metadata` for metadata routers. `pipeline` names "
        "one of the tenant's pipelines (default: the collection's, or the federation's, if set). limit "
        "defaults to the collection's configured limit; mode, fusion and alpha to its defaults. Collections "
        "that fail in a federated search are named in the response's extensions.partialFailures. "
        "`conversationId` records the search as a turn of that conversation and resolves follow-ups "
        "(\"who wrote it?\") against its earlier turns; the trace's followUp stage says what was resolved. "
        "`image` (base64 PNG or JPEG, at most 4 MiB) searches by that image instead: only collections whose "
        "encoder maps images take it, and `query` then only routes and labels the search (docs/multimodal.md)."))
    async def search(self, info: Info[Context, None], query: str, namespace: str | None = None,
                     collection: str | None = None, mode: ModeEnum | None = None,  # type: ignore[valid-type]
                     limit: int | None = None, threshold: float | None = None, filter: FilterInput | None = None,
                     fusion: FusionEnum | None = None, alpha: float | None = None,  # type: ignore[valid-type]
                     collections: list[str] | None = None, namespaces: list[str] | None = None,
                     federated: bool = False, metadata: JSON | None = None,
                     pipeline: str | None = None, conversation_id: str | None = None,
                     image: str | None = None) -> SearchResult:
        ctx = info.context
        request = _request(query, namespace, collection, mode, limit, threshold, filter, fusion, alpha, collections,
                           namespaces, federated, metadata, pipeline, conversation_id, image)
        request = dataclasses.replace(request, fields=stored_fields(info.selected_fields))
        result = await ctx.searcher.search(ctx.principal, request)
        _report_failures(info, result)
        return SearchResult(hits=[Hit.from_domain(h) for h in result.hits], trace=Trace.from_domain(result.trace))

    @strawberry.field(description=(
        "Search, then render the hits as a prompt block: a '## Retrieved Context (<query>)' header, then one "
        "line per hit: '- [sourceId/chunkId] (namespace/collection · rank N · score S) content'. Scores have "
        "three significant digits. maxChars (or maxTokens, at 4 characters a token) cuts content at a word and "
        "never a citation marker. No hits is a NO_EVIDENCE error."))
    async def context(self, info: Info[Context, None], query: str, namespace: str | None = None,
                      collection: str | None = None, mode: ModeEnum | None = None,  # type: ignore[valid-type]
                      limit: int | None = None, threshold: float | None = None, filter: FilterInput | None = None,
                      fusion: FusionEnum | None = None, alpha: float | None = None,  # type: ignore[valid-type]
                      collections: list[str] | None = None, namespaces: list[str] | None = None,
                      federated: bool = False, metadata: JSON | None = None,
                      pipeline: str | None = None, max_chars: int | None = None,
                      max_tokens: int | None = None, conversation_id: str | None = None) -> ContextResult:
        ctx = info.context
        result = await ctx.searcher.search(ctx.principal, _request(
            query, namespace, collection, mode, limit, threshold, filter, fusion, alpha, collections, namespaces,
            federated, metadata, pipeline, conversation_id))
        _report_failures(info, result)
        text = render_context(query, result.hits, max_chars=max_chars, max_tokens=max_tokens,
                              reasons=result.trace.all_warnings())
        return ContextResult(text=text, hits=[Hit.from_domain(h) for h in result.hits],
                             trace=Trace.from_domain(result.trace))

    @strawberry.field(description=(
        "Check an answer's [sourceId/chunkId] citations against the evidence it was written from: each is "
        "valid, unknown (not in the evidence) or misquoted (a quoted span right before it is not in the "
        "chunk, compared after Unicode, case and whitespace normalisation). required: true also lists "
        "sentences that cite nothing. Deterministic; no model."))
    def validate_citations(self, answer: str, evidence: list[EvidenceInput], required: bool = False) -> CitationReport:
        report = validate_citations(answer, [e.to_domain() for e in evidence], required=required)
        return CitationReport.from_domain(report)

    @strawberry.field(description="The agent tools (search, getSource, validateCitations, and a "
                                  "<prefix>Search/<prefix>GetSource pair per collection with a tool_prefix) as "
                                  "OpenAI function definitions; the same tools are served over MCP at /mcp.")
    def tool_definitions(self, info: Info[Context, None]) -> JSON:
        tools = info.context.tools.definitions_for(info.context.principal.tenant)
        return [definition.openai() for definition in tools]

    @strawberry.field(description="The collections the caller's tenant may search.")
    async def collections(self, info: Info[Context, None]) -> list[CollectionInfo]:
        ctx = info.context
        refs = ctx.searcher.collections(ctx.principal)
        return [CollectionInfo.from_domain(ref, await ctx.searcher.chunk_count(ref)) for ref in refs]

    @strawberry.field(description="All chunks of one source, in order (for a citation UI).")
    async def source(self, info: Info[Context, None], namespace: str, source_id: str,
                     collection: str | None = None) -> Source:
        ctx = info.context
        found = await ctx.searcher.source(ctx.principal, namespace, source_id, collection)
        first = found.chunks[0]
        return Source(namespace=found.ref.scope.namespace, collection=found.ref.scope.collection,
                      source_id=source_id, title=first.title or None, source_url=first.source_url or None,
                      source_path=first.source_path or None, metadata=dict(first.metadata),
                      chunks=[SourceChunk.from_domain(c) for c in found.chunks])

    @strawberry.field(description="The last `last` live turns of one of the caller's conversations (default: all "
                                  "kept, at most the tenant's conversations.max_turns); expired turns are gone.")
    async def conversation(self, info: Info[Context, None], id: str, last: int | None = None) -> Conversation:
        ctx = info.context
        turns = await ctx.searcher.conversations.read(ctx.principal.tenant, id, last)
        return Conversation(id=id, turns=[ConversationTurn.from_domain(t) for t in turns])


@strawberry.type
class Mutation:
    @strawberry.mutation(description="Index documents into one of the caller's collections (writer or admin). "
                                     "Idempotent: unchanged chunks are neither embedded nor written.")
    async def upsert_documents(self, info: Info[Context, None], namespace: str, collection: str,
                               documents: list[DocumentInput]) -> UpsertResult:
        ctx = info.context
        report = await ctx.writer.upsert(ctx.principal, namespace, collection, [d.to_domain() for d in documents])
        return UpsertResult.from_domain(report)

    @strawberry.mutation(description="Delete every chunk and parent of one source (writer or admin).")
    async def delete_source(self, info: Info[Context, None], namespace: str, collection: str,
                            source_id: str) -> DeleteResult:
        ctx = info.context
        deleted = await ctx.writer.delete_source(ctx.principal, namespace, collection, source_id)
        return DeleteResult(source_id=source_id, chunks_deleted=deleted)

    @strawberry.mutation(description=(
        "Store one agent memory in a `kind: memory` collection (writer or admin). importance is 0 to 1; "
        "memoryType one of the collection's types; id (a sourceId) replaces the memory of that id. Recall with "
        "search(collection: ...), filtering on metadata.user_id and metadata.memory_type; hits score "
        "alpha*recency + beta*relevance + gamma*importance."))
    async def add_memory(self, info: Info[Context, None], namespace: str, collection: str, content: str,
                         user_id: str, memory_type: str, importance: float = 0.5,
                         id: str | None = None) -> MemoryEntry:
        ctx = info.context
        memory = await ctx.writer.add_memory(ctx.principal, namespace, collection, content, user_id=user_id,
                                             memory_type=memory_type, importance=importance, memory_id=id)
        return MemoryEntry.from_domain(memory)

    @strawberry.mutation(description="Delete every turn of one of the caller's conversations.")
    async def clear_conversation(self, info: Info[Context, None], id: str) -> ClearedConversation:
        ctx = info.context
        deleted = await ctx.searcher.conversations.clear(ctx.principal.tenant, id)
        return ClearedConversation(id=id, turns_deleted=deleted)


def build_schema(settings: Settings) -> GatewaySchema:
    documents = document_cache(settings.max_tokens, settings.max_query_depth, settings.max_aliases)
    return GatewaySchema(
        documents,
        query=Query,
        mutation=Mutation,
        extensions=[
            cached_documents(documents),  # parse + validation (depth and alias limits), once per text
            lambda: MaxTokensLimiter(max_token_count=settings.max_tokens),  # a document the cache could not parse
            DomainErrors,
            PartialFailures,
        ],
    )
