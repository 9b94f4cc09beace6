"""`searchProgress`: a search's first-pass hits as soon as they are ranked, then its final result.

A pipeline's stages (rerank, expansion, compression) can take most of a search's time; a UI
can show the first retrieval's hits meanwhile and replace them when the final ranking arrives.
It is a GraphQL subscription served over plain HTTP (Server-Sent Events with `Accept:
text/event-stream`, or `multipart/mixed; subscriptionSpec=1.0`), so it passes through the same
key check, admission, cost and deadline as `search`: it is one search, answered in two parts.
WebSockets are not served. A search without a pipeline has no first pass to show: it answers
with the FINAL part only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from enum import Enum
from typing import Annotated

import strawberry
from strawberry.types import Info

from gateway.graphql.context import Context
from gateway.graphql.highlights import highlight_loader
from gateway.graphql.inputs import SearchInput
from gateway.graphql.pagination import search_digest
from gateway.graphql.results import search_result
from gateway.graphql.types import SearchHit, SearchResult, ranked
from gateway.retrieval.hit import Hit


@strawberry.enum(description="Which part of a searchProgress answer this is.")
class SearchPhase(Enum):
    RETRIEVED = strawberry.enum_value("retrieved", description=(
        "The first retrieval's top `limit` hits, before the pipeline's stages; sent only when a pipeline runs"))
    FINAL = strawberry.enum_value("final", description="The search's answer, as `search` returns it; always last")


@strawberry.type(description="One part of a searchProgress answer.")
class SearchProgress:
    phase: SearchPhase = strawberry.field(description="RETRIEVED first (with a pipeline), then FINAL")
    hits: list[SearchHit] = strawberry.field(description=(
        "RETRIEVED: the first pass, best first; FINAL: the final hits (result.hits)"))
    result: SearchResult | None = strawberry.field(description="The full result; null until FINAL")


@strawberry.type(description=(
    "Operations answered in parts, over plain HTTP only (Server-Sent Events with `Accept: text/event-stream`, or "
    "`multipart/mixed; subscriptionSpec=1.0`); no WebSocket transport. The same key, admission, cost and deadline "
    "apply as to a query."))
class Subscription:
    @strawberry.subscription(description=(
        "The same search as `search` (see SearchInput), answered in parts over HTTP (text/event-stream or "
        "multipart/mixed; subscriptionSpec=1.0): with a pipeline, its first-pass hits as soon as they are ranked "
        "(RETRIEVED), then the final result (FINAL). Not paged: the FINAL result has every hit."))
    async def search_progress(self, info: Info[Context, None],
                              input: Annotated[SearchInput, strawberry.argument(description=(
                                  "What to search and how, as `search` takes it (see SearchInput)"))]
                              ) -> AsyncGenerator[SearchProgress, None]:
        ctx = info.context
        request = input.to_request()
        first_pass: asyncio.Queue[list[Hit]] = asyncio.Queue(maxsize=1)
        search = asyncio.ensure_future(ctx.searcher.search(ctx.principal, request, preview=first_pass.put_nowait))
        shown = asyncio.ensure_future(first_pass.get())
        try:
            await asyncio.wait({search, shown}, return_when=asyncio.FIRST_COMPLETED)
            if shown.done():
                first = shown.result()
                # Highlighted against the query as sent: a follow-up's resolution comes with the final result.
                searched = "" if request.image is not None else request.query
                yield SearchProgress(phase=SearchPhase.RETRIEVED, result=None,
                                     hits=ranked(first, highlight_loader(ctx, request, searched, first)))
            result = await search
        finally:
            shown.cancel()
            search.cancel()  # the client went away or a part failed: stop the search's stages too
        final = search_result(result, search_digest(ctx.principal.tenant, request), None, None,
                              ctx.searcher.max_limit, highlight_loader(ctx, request, result.searched, result.hits))
        yield SearchProgress(phase=SearchPhase.FINAL, hits=final.hits, result=final)
