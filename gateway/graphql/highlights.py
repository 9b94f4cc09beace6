"""The per-search loader of hit highlights: one computation for the hits of a page that select them.

`SearchHit.highlights` asks the loader for its hit by its place in the ranked hits; the loads of
one page arrive together and are answered in one `Searcher.highlight` call (one embedding batch
for the sentences), and hits whose highlights are not selected cost nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from strawberry.dataloader import DataLoader

from gateway.graphql.context import Context
from gateway.graphql.types import HighlightLoader
from gateway.retrieval.hit import Hit
from gateway.routing.searcher import SearchRequest


def highlight_loader(ctx: Context, request: SearchRequest, searched: str, hits: Sequence[Hit]) -> HighlightLoader:
    """Loads the highlights of `hits[i]` for the text the search ran (`searched`)."""

    async def load(places: Sequence[int]) -> list:
        return await ctx.searcher.highlight(ctx.principal, searched, request.vector, [hits[i] for i in places])

    return DataLoader(load_fn=load)
