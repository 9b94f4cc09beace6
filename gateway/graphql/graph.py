"""Names and edges: which sources an answer's names come from (`linkNames`), and the inferred
similarity edges between a collection's sources (`inferredEdges`). Transport only."""

from __future__ import annotations

from typing import Annotated

import strawberry
from strawberry.types import Info

from gateway.errors import InvalidInput
from gateway.graphql.context import Context
from gateway.graphql.cost import HITS_PER_NAME
from gateway.graphql.enums import described
from gateway.graphql.inputs import StoredEvidenceInput
from gateway.grounding.names import MAX_NAMES, PER_NAME, NameLink, Passage, link_names, names_in
from gateway.retrieval.options import Mode
from gateway.routing.graph import MAX_EDGES, EdgeSearch
from gateway.routing.searcher import SearchRequest
from gateway.storage.edges import RELATION, Direction


EdgeDirectionEnum = described(Direction, name="EdgeDirection", description=(
    "Which of a source's inferred edges to return."), values={
    Direction.OUT: "Edges from the source's chunks to other sources",
    Direction.IN: "Edges from other sources' chunks to the source",
    Direction.BOTH: "Both",
})


@strawberry.type(description=(
    "An inferred edge: a chunk of one source is similar to another source (relation `similar`), computed at "
    "ingest from the chunks' dense vectors when the collection sets graph.infer_threshold."))
class InferredEdge:
    from_source_id: str = strawberry.field(description="The source whose chunk the edge starts from")
    from_chunk_id: str = strawberry.field(description="That chunk's id; cite as [fromSourceId/fromChunkId]")
    to_source_id: str = strawberry.field(description="The source the chunk is similar to (its most similar chunk)")
    relation: str = strawberry.field(description="`similar`, the one relation inferred at ingest")
    similarity: float = strawberry.field(description=(
        "The cosine similarity of the two chunks' dense vectors, at least the collection's infer_threshold"))
    description: str = strawberry.field(description=(
        "The edge in one sentence, e.g. \"chunk 0 of 'refunds' is similar to 'card-refunds' (cosine 0.87)\""))


@strawberry.type(description="A source's inferred edges in one collection, and how that collection infers them.")
class InferredEdges:
    namespace: str = strawberry.field(description="The collection's namespace")
    collection: str = strawberry.field(description="The collection")
    source_id: str = strawberry.field(description="The source asked about")
    enabled: bool = strawberry.field(description=(
        "Whether the collection infers edges (graph.infer_threshold is set); false: edges is always empty"))
    threshold: float | None = strawberry.field(description=(
        "The cosine similarity at or above which ingest adds an edge (graph.infer_threshold); null when off"))
    per_node: int = strawberry.field(description=(
        "Edges kept per chunk at ingest: its most similar other sources (graph.infer_per_node)"))
    description: str = strawberry.field(description="How the collection's edges are made, in one sentence")
    edges: list[InferredEdge] = strawberry.field(description=(
        "The source's edges in the direction asked, most similar first (equal similarity: by chunk id, then "
        "target), at most `limit`"))

    @classmethod
    def from_domain(cls, found: EdgeSearch) -> InferredEdges:
        graph = found.ref.config.graph
        if graph.infer_threshold is None:
            about = "This collection infers no edges (graph.infer_threshold is not set)."
        else:
            about = (f"At ingest, each chunk gets an edge to each of its {graph.infer_per_node} most similar other "
                     f"sources whose best chunk has a cosine similarity of at least {graph.infer_threshold:g}.")
        return cls(namespace=found.ref.scope.namespace, collection=found.ref.scope.collection,
                   source_id=found.source_id, enabled=graph.infer_threshold is not None,
                   threshold=graph.infer_threshold, per_node=graph.infer_per_node, description=about,
                   edges=[InferredEdge(from_source_id=e.from_source, from_chunk_id=e.from_chunk,
                                       to_source_id=e.to_source, relation=RELATION, similarity=e.similarity,
                                       description=f"chunk {e.from_chunk} of {e.from_source!r} is {RELATION} to "
                                                   f"{e.to_source!r} (cosine {e.similarity:.2f})")
                          for e in found.edges])


@strawberry.type(description="A source that mentions a name: its citation key and where the name occurs in it.")
class NameCitation:
    source_id: str = strawberry.field(description="The passage's sourceId")
    chunk_id: str = strawberry.field(description="The passage's chunkId")
    marker: str = strawberry.field(description=(
        "The citation key as an answer writes it, [sourceId/chunkId] (brackets and backslashes in ids escaped)"))
    in_title: bool = strawberry.field(description="The passage's title mentions the name")
    mentions: int = strawberry.field(description="How often the passage's content mentions the name (whole words)")


@strawberry.type(name="NameLink", description="A name the answer mentions, with the sources that mention it.")
class LinkedName:
    name: str = strawberry.field(description="The name as the answer first writes it")
    start: int = strawberry.field(description="Offset of its first mention in the answer, in Unicode code points")
    end: int = strawberry.field(description="End offset (exclusive) of its first mention, in Unicode code points")
    mentions: int = strawberry.field(description="How often the answer mentions it (whole words, case-folded)")
    citations: list[NameCitation] = strawberry.field(description=(
        f"Passages that mention it, at most {PER_NAME}: those whose title does first, then by mentions in the "
        "content, then in the order given; empty when none does (the name is unlinked)"))

    @classmethod
    def from_domain(cls, link: NameLink) -> LinkedName:
        return cls(name=link.name, start=link.start, end=link.end, mentions=link.mentions,
                   citations=[NameCitation(source_id=c.source_id, chunk_id=c.chunk_id, marker=c.marker,
                                           in_title=c.in_title, mentions=c.mentions) for c in link.citations])


@strawberry.input(description="A passage an answer may have drawn on: its citation ids, title and content.")
class PassageInput:
    source_id: str = strawberry.field(description="The passage's chunk.sourceId")
    chunk_id: str = strawberry.field(description="The passage's chunk.chunkId")
    content: str = strawberry.field(description="The passage's text as the answer's writer saw it")
    title: str | None = strawberry.field(default=None, description="Its source's title; default: none")


@strawberry.type
class GraphQuery:
    @strawberry.field(description=(
        "A source's inferred similarity edges in one of the caller's collections (computed at ingest when the "
        "collection sets graph.infer_threshold; the expand stage follows them), most similar first, with how the "
        "collection infers them. An unknown collection is UNKNOWN_COLLECTION; a source without edges has none."))
    async def inferred_edges(
            self, info: Info[Context, None],
            namespace: Annotated[str, strawberry.argument(description="The collection's namespace")],
            collection: Annotated[str, strawberry.argument(description="The collection, one of the caller's tenant")],
            source_id: Annotated[str, strawberry.argument(description="The source whose edges to return")],
            direction: Annotated[EdgeDirectionEnum, strawberry.argument(description=(  # type: ignore[valid-type]
                "OUT, IN or BOTH; default BOTH"))] = Direction.BOTH,
            min_similarity: Annotated[float, strawberry.argument(description=(
                "Only edges with at least this cosine similarity, 0 to 1; default 0"))] = 0.0,
            limit: Annotated[int, strawberry.argument(description=(
                f"At most this many edges, 1 to {MAX_EDGES}; default 20"))] = 20) -> InferredEdges:
        ctx = info.context
        found = await ctx.searcher.inferred_edges(ctx.principal, namespace, collection, source_id, Direction(direction),
                                                  min_similarity, limit)
        return InferredEdges.from_domain(found)

    @strawberry.field(description=(
        "The names an answer mentions (capitalised runs like 'Acme Vault', codes like 'SSO' or 'ACME-SVC-503', "
        "spans in backticks or double quotes), each linked to the sources that mention it, as citation keys. "
        "Deterministic, no model. The passages are either the caller's (passages) or found in the caller's "
        f"tenant (sources: a BM25 search of each name, its best {HITS_PER_NAME} hits), exactly one; at most "
        f"{MAX_NAMES} names."))
    async def link_names(
            self, info: Info[Context, None],
            answer: Annotated[str, strawberry.argument(description="The answer text whose names to link")],
            passages: Annotated[list[PassageInput] | None, strawberry.argument(description=(
                "The passages the answer was written from (at most 200); or give sources"))] = None,
            sources: Annotated[StoredEvidenceInput | None, strawberry.argument(description=(
                "Search the caller's sources in this namespace (and collection, if given; else every collection "
                "of the namespace) for each name instead of caller-supplied passages"))] = None,
    ) -> list[LinkedName]:
        ctx = info.context
        if (passages is None) == (sources is None):
            raise InvalidInput("linkNames takes exactly one of passages and sources; got "
                               f"{'both' if sources is not None else 'neither'}")
        if passages is not None:
            found = [Passage(p.source_id, p.chunk_id, p.content, p.title or "") for p in passages]
        else:
            assert sources is not None
            found = await _searched(ctx, answer, sources)
        return [LinkedName.from_domain(link) for link in link_names(answer, found)]


async def _searched(ctx: Context, answer: str, sources: StoredEvidenceInput) -> list[Passage]:
    """The best BM25 hits of each name in the caller's sources (each passage once)."""
    passages: dict[tuple[str, str, str], Passage] = {}
    for mention in names_in(answer):
        names = [mention.name] + ([mention.shorter.name] if mention.shorter is not None else [])
        for name in names:
            request = SearchRequest(query=name, namespace=sources.namespace, collection=sources.collection,
                                    namespaces=None if sources.collection else (sources.namespace,),
                                    federated=sources.collection is None, mode=Mode.SPARSE, limit=HITS_PER_NAME)
            result = await ctx.searcher.search(ctx.principal, request)
            for hit in result.hits:
                passages.setdefault((hit.collection, hit.source_id, hit.chunk_id),
                                    Passage(hit.source_id, hit.chunk_id, hit.content, hit.title or ""))
    return list(passages.values())
