"""The Strawberry schema: thin resolvers that parse, delegate and map."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Annotated

import strawberry
from strawberry.scalars import JSON
from strawberry.extensions import MaxTokensLimiter
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.name_converter import NameConverter
from strawberry.types import Info

from gateway.graphql.admin import AdminMutation, AdminQuery
from gateway.graphql.context import Context
from gateway.graphql.graph import GraphQuery
from gateway.graphql.jobs import JobMutation, JobQuery
from gateway.graphql.platform import PlatformMutation, PlatformQuery
from gateway.graphql.documents import cached_documents, document_cache
from gateway.graphql.highlights import highlight_loader
from gateway.graphql.enums import ErrorCodeEnum
from gateway.graphql.completion import PlainCompletion
from gateway.graphql.errors import CodedVariables, DomainErrors, GatewaySchema, PartialFailures
from gateway.graphql.inputs import DocumentInput, EvidenceInput, SearchInput, StoredEvidenceInput
from gateway.graphql.pagination import check_page, search_digest
from gateway.graphql.progress import Subscription
from gateway.graphql.results import search_result
from gateway.graphql.scalars import scalar_overrides
from gateway.graphql.selection import search_selection
from gateway.graphql.types import (
    CitationReport,
    ClearedConversation,
    CollectionInfo,
    ContextResult,
    Conversation,
    ConversationTurn,
    DeleteResult,
    DeleteSourcesResult,
    Facets,
    MemoryEntry,
    SearchHit,
    SearchResult,
    Source,
    SourceChunk,
    Trace,
    UpsertResult,
    chunk_id,
    ranked,
)
from gateway.grounding.citations import validate_citations
from gateway.grounding.stored import stored_evidence
from gateway.grounding.support import MAX_CHECKS, check_support_bundled
from gateway.grounding.context import render_context
from gateway.errors import InvalidInput
from gateway.storage.milvus import StoredChunk
from gateway.routing.searcher import SearchRequest
from gateway.routing.searcher import SearchResult as SearchResult_
from gateway.settings import Settings


_SEARCH = "What to search and how (see SearchInput)"
_Namespace = Annotated[str, strawberry.argument(description="The namespace of the collection to write")]
_Collection = Annotated[str, strawberry.argument(description="The collection to write, one of the caller's tenant")]


async def _stored_chunks(ctx: Context, stored: StoredEvidenceInput, source_id: str) -> Sequence[StoredChunk]:
    found = await ctx.searcher.source(ctx.principal, stored.namespace, source_id, stored.collection)
    return found.chunks


def _report_failures(info: Info[Context, None], result: SearchResult_) -> None:
    info.context.partial_failures.extend(
        {"collection": f.collection, "reason": f.reason, "code": f.code} for f in result.failures)


@strawberry.type
class Query:
    @strawberry.field(description=(
        "Find evidence for a query in the caller's collections (see SearchInput). The search ranks `limit` hits; "
        "`first` and `after` page through them: pass pageInfo.endCursor as `after`, with the same input, for the "
        "next page. Collections that fail in a federated search are named in the response's "
        "extensions.partialFailures. Nullable so that a failing search is null on its own, with its coded error "
        "in `errors` (path: its alias), while the other fields of the request keep their data."))
    async def search(self, info: Info[Context, None],
                     input: Annotated[SearchInput, strawberry.argument(description=_SEARCH)],
                     first: Annotated[int | None, strawberry.argument(description=(
                         "Page size: at most this many hits (with groupBy: groups), 1 to GATEWAY_MAX_LIMIT; "
                         "default: all of them"))] = None,
                     after: Annotated[str | None, strawberry.argument(description=(
                         "pageInfo.endCursor of the previous page of the same search"))] = None) -> SearchResult | None:
        ctx = info.context
        selection = search_selection(info)
        request = input.to_request()
        # A cursor is checked or minted only when one is passed or pageInfo is selected.
        digest = search_digest(ctx.principal.tenant, request) if after is not None or selection.page_info else None
        check_page(digest, first, after, ctx.searcher.max_limit)  # before the search runs
        request = dataclasses.replace(request, fields=selection.stored)
        result = await ctx.searcher.search(ctx.principal, request)
        _report_failures(info, result)
        return search_result(result, digest, first, after, ctx.searcher.max_limit,
                             highlight_loader(ctx, request, result.searched, result.hits))

    @strawberry.field(description=(
        "Search (see SearchInput), then render the hits as a prompt block: a '## Retrieved Context (<query>)' "
        "header, then one line per hit: '- [sourceId/chunkId] (namespace/collection · rank N · score S) content'. "
        "Scores have three significant digits. maxChars (or maxTokens, at 4 characters a token) cuts content at a "
        "word and never a citation marker. No hits is a NO_EVIDENCE error; like search, a failing context is null on "
        "its own and leaves the request's other fields alone."))
    async def context(self, info: Info[Context, None],
                      input: Annotated[SearchInput, strawberry.argument(description=_SEARCH)],
                      max_chars: Annotated[int | None, strawberry.argument(description=(
                          "A hard bound on the whole block's length in characters, header and notes included "
                          "(at least 64): content is cut at a word with an ellipsis, and hits that do not fit "
                          "are left out with a note; default: no bound"))] = None,
                      max_tokens: Annotated[int | None, strawberry.argument(description=(
                          "The same bound in tokens, counted as 4 characters a token (at least 16); with maxChars "
                          "too, the smaller bound applies; default: no bound"))] = None) -> ContextResult | None:
        ctx = info.context
        request = input.to_request()
        result = await ctx.searcher.search(ctx.principal, request)
        _report_failures(info, result)
        # A search by a vector alone has no words to head the block with; it says what it was.
        block = render_context(input.query or "query vector", result.hits, max_chars=max_chars,
                               max_tokens=max_tokens, reasons=result.trace.all_warnings())
        return ContextResult(text=block.text, left_out=block.left_out, shortened=block.shortened,
                             hits=ranked(result.hits, highlight_loader(ctx, request, result.searched, result.hits)),
                             trace=Trace.from_domain(result.trace),
                             facets=None if result.facets is None else Facets.from_domain(result.facets))

    @strawberry.field(description=(
        "Check an answer's [sourceId/chunkId] citations: each is valid, unknown (not in the evidence) or misquoted "
        "(a quoted span right before it is not in the chunk, compared after Unicode, case and whitespace "
        "normalisation), and (support: true, the default) whether the cited chunk backs the sentence, by the "
        f"bundled cross-encoder: SUPPORTED, WEAK or UNSUPPORTED with its score (at most {MAX_CHECKS} pairs per "
        "call). The evidence is either what the caller passes (evidence) or the stored chunks the markers name "
        "(stored), exactly one. required: true also lists sentences that cite nothing."))
    async def validate_citations(
            self, info: Info[Context, None],
            answer: Annotated[str, strawberry.argument(description=(
                "The answer to check, citing with [sourceId/chunkId] markers (\\[, \\] and \\\\ inside a marker "
                "stand for [, ] and \\, as `context` prints them), a quoted span right before a marker where it "
                "quotes"))],
            evidence: Annotated[list[EvidenceInput] | None, strawberry.argument(description=(
                "The hits the answer was written from: each one's ids and the content it showed; or give "
                "stored"))] = None,
            stored: Annotated[StoredEvidenceInput | None, strawberry.argument(description=(
                "Check against the chunks stored under the cited ids in this namespace (of the caller's tenant) "
                "instead of caller-supplied evidence"))] = None,
            required: Annotated[bool, strawberry.argument(description=(
                "Also list the sentences that cite nothing, and make `valid` false when there are any; default "
                "false"))] = False,
            support: Annotated[bool, strawberry.argument(description=(
                "Score each VALID citation's (sentence, chunk) with the cross-encoder (about 75 ms of a core "
                "each); false skips the model and the check is deterministic; default true"))] = True,
    ) -> CitationReport:
        ctx = info.context
        if (evidence is None) == (stored is None):
            raise InvalidInput("validateCitations takes exactly one of evidence and stored; got "
                               f"{'both' if stored is not None else 'neither'}")
        if stored is not None:
            items = await stored_evidence(answer, lambda source_id: _stored_chunks(ctx, stored, source_id))
        else:
            items = [e.to_domain() for e in evidence or ()]
        report = validate_citations(answer, items, required=required)
        if support:
            report = await check_support_bundled(report, items)
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
        return [CollectionInfo.from_domain(ref, await ctx.searcher.chunk_count(ref), ctx.searcher.dimension(ref))
                for ref in refs]

    @strawberry.field(description="All chunks of one source, in order (for a citation UI).")
    async def source(self, info: Info[Context, None],
                     namespace: Annotated[str, strawberry.argument(description="The source's namespace")],
                     source_id: Annotated[str, strawberry.argument(description=(
                         "The source's id (chunk.sourceId, the sourceId of a citation marker)"))],
                     collection: Annotated[str | None, strawberry.argument(description=(
                         "The collection to read; default: the namespace's collections in turn, the first that has "
                         "the source (UNKNOWN_SOURCE when none has)"))] = None) -> Source:
        ctx = info.context
        found = await ctx.searcher.source(ctx.principal, namespace, source_id, collection)
        first = found.chunks[0]
        return Source(namespace=found.ref.scope.namespace, collection=found.ref.scope.collection,
                      source_id=source_id, title=first.title or None, source_url=first.source_url or None,
                      source_path=first.source_path or None, metadata=dict(first.metadata),
                      chunks=[SourceChunk.from_domain(c) for c in found.chunks])

    @strawberry.field(description="The last `last` live turns of one of the caller's conversations (default: all "
                                  "kept, at most the tenant's conversations.max_turns); expired turns are gone. A key "
                                  "bound to a user sees only the conversations it recorded itself.")
    async def conversation(self, info: Info[Context, None],
                           id: Annotated[str, strawberry.argument(description=(
                               "The conversation's id, as the searches passed it in SearchInput.conversationId"))],
                           last: Annotated[int | None, strawberry.argument(description=(
                               "Return only this many of the newest turns; default: all kept"))] = None
                           ) -> Conversation:
        ctx = info.context
        turns = await ctx.searcher.conversations.read(ctx.principal.tenant, id, last, user_id=ctx.principal.user_id)
        return Conversation(id=id, turns=[ConversationTurn.from_domain(t) for t in turns])


@strawberry.type
class Mutation:
    @strawberry.mutation(description="Index documents into one of the caller's collections (writer or admin). "
                                     "Idempotent: unchanged chunks are neither embedded nor written.")
    async def upsert_documents(self, info: Info[Context, None], namespace: _Namespace, collection: _Collection,
                               documents: Annotated[list[DocumentInput], strawberry.argument(description=(
                                   "The documents: at most GATEWAY_MAX_UPSERT_DOCUMENTS (256) per call, cut into at "
                                   "most GATEWAY_MAX_UPSERT_CHUNKS (2,048) chunks in all"))]) -> UpsertResult:
        ctx = info.context
        report = await ctx.writer.upsert(ctx.principal, namespace, collection,
                                         [d.to_domain(i) for i, d in enumerate(documents)])
        ref = ctx.searcher.registry.resolve(ctx.principal.tenant, collection, namespace=namespace)
        return UpsertResult.from_domain(ref.scope.namespace, ref.scope.collection, report)

    @strawberry.mutation(description="Delete every chunk and parent of one source (writer or admin).")
    async def delete_source(self, info: Info[Context, None], namespace: _Namespace, collection: _Collection,
                            source_id: Annotated[str, strawberry.argument(description=(
                                "The source to delete; UNKNOWN_SOURCE when the collection has no chunk of it"))]
                            ) -> DeleteResult:
        ctx = info.context
        deleted = await ctx.writer.delete_source(ctx.principal, namespace, collection, source_id)
        ref = ctx.searcher.registry.resolve(ctx.principal.tenant, collection, namespace=namespace)
        return DeleteResult(source_id=source_id, chunks_deleted=len(deleted),
                            chunk_ids=[chunk_id(ref.scope.namespace, ref.scope.collection, source_id, c)
                                       for c in deleted])

    @strawberry.mutation(description=(
        "Delete every chunk and parent of up to 500 sources in a few store calls (writer or admin): for many "
        "sources, far cheaper than one deleteSource each. Ids with no chunk are listed in `missing`, not an error."))
    async def delete_sources(self, info: Info[Context, None], namespace: _Namespace, collection: _Collection,
                             source_ids: Annotated[list[str], strawberry.argument(description=(
                                 "The sources to delete: 1 to 500 ids"))]) -> DeleteSourcesResult:
        ctx = info.context
        done = await ctx.writer.delete_sources(ctx.principal, namespace, collection, source_ids)
        ref = ctx.searcher.registry.resolve(ctx.principal.tenant, collection, namespace=namespace)
        return DeleteSourcesResult(
            deleted=[DeleteResult(source_id=s, chunks_deleted=len(ids),
                                  chunk_ids=[chunk_id(ref.scope.namespace, ref.scope.collection, s, c) for c in ids])
                     for s, ids in done.deleted],
            missing=list(done.missing))

    @strawberry.mutation(description=(
        "Store one agent memory in a `kind: memory` collection (writer or admin). importance is 0 to 1; "
        "memoryType one of the collection's types; id (a sourceId) replaces the memory of that id. Recall with "
        "search(input: {collection: ...}), filtering on metadata.user_id and metadata.memory_type; hits score "
        "alpha*recency + beta*relevance + gamma*importance."))
    async def add_memory(
            self, info: Info[Context, None], namespace: _Namespace,
            collection: Annotated[str, strawberry.argument(description="A collection of `kind: memory`")],
            content: Annotated[str, strawberry.argument(description="The memory's text")],
            user_id: Annotated[str, strawberry.argument(description=(
                "Whose memory it is; stored as metadata.user_id, for recall to filter on"))],
            memory_type: Annotated[str, strawberry.argument(description=(
                "One of the collection's memory types (by default episodic, semantic, procedural); stored as "
                "metadata.memory_type"))],
            importance: Annotated[float, strawberry.argument(description=(
                "0 to 1: weighs the memory in recall (gamma * importance); default 0.5"))] = 0.5,
            id: Annotated[str | None, strawberry.argument(description=(
                "Replace the memory with this id (its sourceId); default: a new memory with a new id"))] = None
    ) -> MemoryEntry:
        ctx = info.context
        memory = await ctx.writer.add_memory(ctx.principal, namespace, collection, content, user_id=user_id,
                                             memory_type=memory_type, importance=importance, memory_id=id)
        return MemoryEntry.from_domain(memory)

    @strawberry.mutation(description="Delete every turn of one of the caller's conversations.")
    async def clear_conversation(self, info: Info[Context, None],
                                 id: Annotated[str, strawberry.argument(description=(
                                     "The conversation's id (SearchInput.conversationId)"))]) -> ClearedConversation:
        ctx = info.context
        deleted = await ctx.searcher.conversations.clear(ctx.principal.tenant, id, user_id=ctx.principal.user_id)
        return ClearedConversation(id=id, turns_deleted=deleted)


_ERRORS = ("A failure is an entry of the response's `errors` whose `extensions.code` is an ErrorCode value (see that "
           "enum), with a message naming the offending value and what is allowed.")
_QUERY = ("Reads. Every request carries an API key (`Authorization: Bearer <key>`) and sees only its tenant's "
          "collections. " + _ERRORS + " Collections a federated search had to leave out are listed in the "
          "response's `extensions.partialFailures` as {collection, reason, code}. tenants and tenant are the platform "
          "operator's (platform key only).")
_MUTATION = ("Writes. upsertDocuments, deleteSource, deleteSources, addMemory and startIngestJob need a writer or admin key; "
             "compactCollection and clearCollection need admin; the tenant lifecycle (createTenant, updateTenant, "
             "deleteTenant, addApiKey, revokeApiKey) needs the platform key, which may select nothing else. "
             + _ERRORS)


def _root(name: str, parts: tuple[type, ...], description: str) -> type:
    """`merge_types`, with a description (Strawberry's takes none): the root type of several modules."""
    return strawberry.type(type(name, parts, {}), description=description)


class Execution(PlainCompletion, CodedVariables):
    """graphql-core's execution with the gateway's variable errors and plain-subtree completion."""


class _ConvertedOnce(NameConverter):
    """Strawberry converts the name of every argument and input field it reads on every request
    (a search input has dozens); they are the schema's own names, so each is converted once."""

    def __init__(self) -> None:
        super().__init__(auto_camel_case=True)
        self._names: dict[str, str] = {}

    def apply_naming_config(self, name: str) -> str:
        converted = self._names.get(name)
        if converted is None:
            converted = super().apply_naming_config(name)
            if len(self._names) < _NAMES_KEPT:
                self._names[name] = converted
        return converted


# Far more than the schema's Python names (a few hundred): a bound, never reached in practice.
_NAMES_KEPT = 4096


def build_schema(settings: Settings) -> GatewaySchema:
    documents = document_cache(settings.max_tokens, settings.max_query_depth, settings.max_aliases)
    return GatewaySchema(
        documents,
        # The admin API and ingest jobs are their own modules (graphql/admin.py, graphql/jobs.py).
        # The platform operator's fields too (graphql/platform.py): platform key only.
        query=_root("Query", (Query, AdminQuery, JobQuery, PlatformQuery, GraphQuery), _QUERY),
        mutation=_root("Mutation", (Mutation, AdminMutation, JobMutation, PlatformMutation), _MUTATION),
        subscription=Subscription,  # searchProgress, over HTTP only (graphql/progress.py)
        types=[ErrorCodeEnum],  # no field returns it: it documents errors[].extensions.code
        scalar_overrides=scalar_overrides(),  # DateTime and JSON say their wire format and TypeScript type
        # Completion plans kept with the cached documents, across requests.
        execution_context_class=type("Execution", (Execution,), {"documents": documents}),
        config=StrawberryConfig(name_converter=_ConvertedOnce()),
        extensions=[
            cached_documents(documents),  # parse + validation (depth and alias limits), once per text
            lambda: MaxTokensLimiter(max_token_count=settings.max_tokens),  # a document the cache could not parse
            DomainErrors,
            PartialFailures,
        ],
    )
