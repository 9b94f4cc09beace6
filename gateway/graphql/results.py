"""A search's GraphQL result: one page of its hits, or of its groups (`search`, `searchProgress`)."""

from __future__ import annotations

from gateway.graphql.pagination import Page, page
from gateway.graphql.types import Facets, HighlightLoader, PageInfo, SearchGroup, SearchHit, SearchResult, Trace, ranked
from gateway.routing.searcher import SearchResult as SearchResult_


def search_result(result: SearchResult_, digest: str | None, first: int | None, after: str | None,
                  max_limit: int, highlighter: HighlightLoader | None = None) -> SearchResult:
    """One page of the ranked hits, or of the groups when the search grouped them. `highlighter`
    loads a hit's highlights by its place in result.hits (graphql/highlights.py)."""
    trace = Trace.from_domain(result.trace)
    facets = None if result.facets is None else Facets.from_domain(result.facets)
    if result.groups is None:
        hits = page(ranked(result.hits, highlighter), digest, first, after, max_limit)
        return SearchResult(hits=list(hits.items), groups=None, total_count=hits.total,
                            page_info=page_info(hits), abstained=result.abstained, trace=trace, facets=facets)
    rank = {hit.key: number for number, hit in enumerate(result.hits, start=1)}
    groups = [SearchGroup(rank=number, score=g.score, namespace=g.namespace, collection=g.collection,
                          source_id=g.source_id,
                          hits=[SearchHit.from_domain(h, rank[h.key], highlighter) for h in g.hits])
              for number, g in enumerate(result.groups, start=1)]
    chosen = page(groups, digest, first, after, max_limit)
    return SearchResult(hits=[h for g in chosen.items for h in g.hits], groups=list(chosen.items),
                        total_count=chosen.total, page_info=page_info(chosen), abstained=result.abstained,
                        trace=trace, facets=facets)


def page_info(chosen: Page) -> PageInfo:
    return PageInfo(has_next_page=chosen.has_next, has_previous_page=chosen.offset > 0, end_cursor=chosen.end_cursor)
