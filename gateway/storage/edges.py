"""Inferred similarity edges between chunks of one collection, stored beside it in Milvus.

Ingest computes them (gateway/ingest/graph.py) when a collection sets `graph.infer_threshold`:
each written chunk gets an edge to each of its `infer_per_node` most similar other sources at or
above the threshold. An edge is one relation, `similar`: chunk `from_row` of source
`from_source` is similar (cosine `similarity`) to source `to_source`'s best-matching chunk. The
`expand` hit stage reads them, and `search` finds a source's edges for the `inferredEdges` query.
Rows live in a record collection per (tenant, namespace, collection); reads and deletes go
through `MilvusStore._boundary`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from pymilvus import DataType

from gateway.storage.filters import literal
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import MAX_ID, Scope, add_placeholder_vector, physical_name, placeholder_index

# Keeps one `in [...]` expression well under any server's expression-size limit.
_BATCH = 500
# Edges one `search` reads before ranking: a source's edges are at most infer_per_node (20) per chunk out,
# and a source many others resemble has more in; ranked in Python, so the read is bounded.
MAX_SCANNED = 16_384
RELATION = "similar"


class Direction(StrEnum):
    OUT = "out"     # edges from the source's chunks to other sources
    IN = "in"       # edges from other sources' chunks to the source
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class Edge:
    """`from_row` (a chunk row id) is similar to a chunk of `to_source`, with cosine `similarity`."""

    from_row: str
    from_source: str
    to_source: str
    similarity: float


def _schema(client):
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=2 * MAX_ID + 1)
    schema.add_field("tenant", DataType.VARCHAR, max_length=256)
    schema.add_field("namespace", DataType.VARCHAR, max_length=256)
    schema.add_field("from_row", DataType.VARCHAR, max_length=MAX_ID)
    schema.add_field("from_source", DataType.VARCHAR, max_length=MAX_ID)
    schema.add_field("to_source", DataType.VARCHAR, max_length=MAX_ID)
    schema.add_field("similarity", DataType.FLOAT)
    add_placeholder_vector(schema)  # rows read by filter only (storage/schema.py)
    return schema


class EdgeStore:
    """Edges of one collection (blocking: call via offload from async code)."""

    def __init__(self, store: MilvusStore) -> None:
        self._store = store

    @staticmethod
    def name(scope: Scope) -> str:
        return physical_name(scope, "e")

    def exists(self, scope: Scope) -> bool:
        return self._store.has_records(self.name(scope))

    def _open(self, scope: Scope) -> str:
        name = self.name(scope)
        self._store.ensure_records(scope, name, _schema, placeholder_index)
        return name

    def replace(self, scope: Scope, rows: Sequence[str], edges: Sequence[Edge]) -> None:
        """The edges from chunk `rows` become `edges` (those rows were just written or removed)."""
        name = self._open(scope)
        self._delete(scope, name, "from_row", rows)
        if edges:
            self._store.insert_records(scope, name, [{
                "id": f"{e.from_row}>{e.to_source}", "from_row": e.from_row, "from_source": e.from_source,
                "to_source": e.to_source, "similarity": float(e.similarity), "placeholder": [0.0, 0.0]}
                for e in edges])

    def delete_sources(self, scope: Scope, sources: Sequence[str]) -> None:
        """Drop the edges from `sources` (deleted); edges to them lead nowhere and are left."""
        if self.exists(scope):
            self._delete(scope, self._open(scope), "from_source", sources)

    def _delete(self, scope: Scope, name: str, field: str, values: Sequence[str]) -> None:
        for start in range(0, len(values), _BATCH):
            batch = values[start:start + _BATCH]
            self._store.delete_records(scope, name, f"{field} in [{', '.join(literal(v) for v in batch)}]")

    def neighbours(self, scope: Scope, rows: Sequence[str]) -> list[Edge]:
        if not rows or not self.exists(scope):
            return []
        name = self._open(scope)
        where = f"from_row in [{', '.join(literal(r) for r in rows[:_BATCH])}]"
        found = self._store.query_records(scope, name, where, ["from_row", "from_source", "to_source", "similarity"],
                                          limit=len(rows) * 20 + 20)
        edges = [Edge(r["from_row"], r["from_source"], r["to_source"], float(r["similarity"])) for r in found]
        return sorted(edges, key=lambda e: (-e.similarity, e.from_row, e.to_source))

    def search(self, scope: Scope, source_id: str, direction: Direction = Direction.BOTH,
               min_similarity: float = 0.0, limit: int = 20) -> list[Edge]:
        """The source's edges in `direction` with at least `min_similarity`, most similar first (ties by
        from_row, then to_source); at most `limit`. A collection without edges has none."""
        if not self.exists(scope):
            return []
        name = self._open(scope)
        value = literal(source_id)
        ends = {Direction.OUT: f"from_source == {value}", Direction.IN: f"to_source == {value}",
                Direction.BOTH: f"(from_source == {value} or to_source == {value})"}[direction]
        found = self._store.query_records(scope, name, ends, ["from_row", "from_source", "to_source", "similarity"],
                                          limit=MAX_SCANNED)
        # Compared as stored (float32): 0.7 is kept by a minimum of 0.7 although float32(0.7) < 0.7.
        least = float(np.float32(min_similarity))
        edges = [Edge(r["from_row"], r["from_source"], r["to_source"], float(r["similarity"])) for r in found
                 if float(r["similarity"]) >= least]
        return sorted(edges, key=lambda e: (-e.similarity, e.from_row, e.to_source))[:limit]
