"""The inferred-edge graph of a collection, searched by source (`inferredEdges`)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.admission.scheduler import offload
from gateway.errors import InvalidInput, LimitExceeded
from gateway.retrieval.hit import split_row_id
from gateway.storage.edges import Direction, Edge, EdgeStore
from gateway.storage.identifiers import check_source_id
from gateway.storage.milvus import MilvusStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.registry import CollectionRef, TenantRegistry

# Edges one answer lists; a source has at most infer_per_node (<= 20) per chunk out.
MAX_EDGES = 100


@dataclass(frozen=True, slots=True)
class FoundEdge:
    """An edge as a client reads it: from a chunk of one source to another source, with its similarity."""

    from_source: str
    from_chunk: str
    to_source: str
    similarity: float


@dataclass(frozen=True, slots=True)
class EdgeSearch:
    ref: CollectionRef
    source_id: str
    direction: Direction
    edges: tuple[FoundEdge, ...]


async def inferred_edges(registry: TenantRegistry, store: MilvusStore, principal: Principal, namespace: str,
                         collection: str, source_id: str, direction: Direction = Direction.BOTH,
                         min_similarity: float = 0.0, limit: int = 20) -> EdgeSearch:
    """The source's inferred edges in one of the caller's collections, most similar first."""
    check_source_id(source_id)
    if not 1 <= limit <= MAX_EDGES:
        raise LimitExceeded(f"limit {limit} is outside 1 to {MAX_EDGES} edges")
    if not 0.0 <= min_similarity <= 1.0:
        raise InvalidInput(f"minSimilarity {min_similarity:g} is outside 0 to 1 (cosine similarity)")
    ref = registry.resolve(principal.tenant, collection, namespace=namespace)
    edges: list[Edge] = await offload(EdgeStore(store).search, ref.scope, source_id, direction, min_similarity, limit)
    found = tuple(FoundEdge(e.from_source, split_row_id(ref.scope.namespace, e.from_row)[1], e.to_source, e.similarity)
                  for e in edges)
    return EdgeSearch(ref, source_id, direction, found)
