"""Links between documents at ingest: `metadata.links` checked, and inferred similarity edges.

`metadata.links` is a list of source ids the document points to (the `expand` stage follows
them). With `graph.infer_threshold` set on the collection, each written chunk also gets an edge
to each of its `infer_per_node` most similar other sources whose best chunk reaches the
threshold (cosine). Edges point from the written chunk only, so each chunk holds at most
`infer_per_node`; an older document gains edges to a newer one when it is ingested again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.errors import InvalidInput
from gateway.retrieval.hit import chunk_row_id
from gateway.storage.edges import Edge, EdgeStore
from gateway.storage.identifiers import check_source_id
from gateway.storage.milvus import ChunkRecord, MilvusStore
from gateway.tenancy.registry import CollectionRef

MAX_LINKS = 64
# Candidates fetched per chunk: its own source's chunks come back first and are skipped.
_OVERFETCH = 8


def check_links(source_id: str, metadata: Mapping[str, Any]) -> None:
    """`metadata.links`, when present, is a list of at most 64 usable source ids."""
    if "links" not in metadata:
        return
    links = metadata["links"]
    if not isinstance(links, list) or not all(isinstance(s, str) for s in links):
        raise InvalidInput(f"metadata.links of document {source_id!r} must be a list of source ids (strings), "
                           f"got {type(links).__name__}")
    if len(links) > MAX_LINKS:
        raise InvalidInput(f"metadata.links of document {source_id!r} has {len(links)} entries; "
                           f"at most {MAX_LINKS} are allowed")
    for link in links:
        try:
            check_source_id(link)
        except InvalidInput as exc:
            raise InvalidInput(f"metadata.links of document {source_id!r}: {exc.message}") from None


def infer_edges(store: MilvusStore, ref: CollectionRef, records: Sequence[ChunkRecord],
                stale: Sequence[str] = ()) -> int:
    """Replace the inferred edges of the written chunks, and drop those of the `stale` chunk rows
    the same write removed; unchanged chunks keep theirs. Returns the edges written."""
    graph = ref.config.graph
    if graph.infer_threshold is None or not (records or stale):
        return 0
    scope = ref.scope
    edges: list[Edge] = []
    for record in records:
        kept: dict[str, float] = {}
        # Only the neighbour's identity and score are read.
        for row in store.search_dense(scope, record.dense, graph.infer_per_node + _OVERFETCH, fields=frozenset()):
            other = row.chunk.source_id
            if other == record.source_id or other in kept or row.score < graph.infer_threshold:
                continue
            kept[other] = row.score
            if len(kept) == graph.infer_per_node:
                break
        row_id = chunk_row_id(scope.namespace, record.source_id, record.chunk_id)
        edges.extend(Edge(row_id, record.source_id, other, score) for other, score in kept.items())
    rows = [chunk_row_id(scope.namespace, r.source_id, r.chunk_id) for r in records]
    EdgeStore(store).replace(scope, [*rows, *stale], edges)
    return len(edges)
