"""`gateway verify`: read every stored row back and check it against how ingest wrote it.

Per collection: each chunk's content hash is recomputed from its stored fields (the same
function ingest uses, gateway/ingest/hashing.py), so a flipped byte in text, title, metadata or
a URL shows; each dense vector must be finite, of the model's dimension and unit length (every
embedder L2-normalises); parents are re-hashed too; orphans are counted (parents no chunk points
to, chunks whose parent row is gone, token vectors of chunks that are gone); row counts are
compared with the gateway's record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from gateway.ingest.hashing import content_hash
from gateway.storage.vectors import vector_digest
from gateway.storage.milvus import MilvusStore, stored_metadata
from gateway.storage.record import RecordSnapshot
from gateway.storage.schema import CHUNK_OUTPUT_FIELDS, MODALITY_FIELD, PARENT_OUTPUT_FIELDS
from gateway.storage.token_vectors import TokenVectorStore
from gateway.tenancy.registry import CollectionRef

# Rows fetched per `get`: one `id in [...]` expression stays well under any size limit.
_BATCH = 500
# float32 storage of a unit vector: its norm is 1 within a few ulps; 1e-3 flags real damage only.
NORM_TOLERANCE = 1e-3
# Findings listed per kind in a report; the counts are always complete.
SHOWN = 5


class Finding(StrEnum):
    CONTENT_HASH = "content_hash_mismatch"
    VECTOR = "bad_vector"
    PARENT_HASH = "parent_hash_mismatch"
    ORPHAN_PARENT = "parent_without_chunks"
    # A chunk whose parent row is gone: parent expansion and `parent` in answers find nothing for it.
    ORPHAN_CHUNK = "chunk_without_parent"
    ORPHAN_TOKENS = "token_vectors_without_chunk"
    COUNT = "count_differs_from_record"


@dataclass
class CollectionCheck:
    """What `verify` found in one collection: counts of rows checked and of each kind of damage."""

    label: str
    chunks: int = 0
    parents: int = 0
    token_vectors: int = 0
    problems: dict[Finding, int] = field(default_factory=dict)
    examples: dict[Finding, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, finding: Finding, example: str) -> None:
        self.problems[finding] = self.problems.get(finding, 0) + 1
        shown = self.examples.setdefault(finding, [])
        if len(shown) < SHOWN:
            shown.append(example)

    def summary(self) -> dict[str, Any]:
        return {"collection": self.label, "ok": self.ok, "chunks": self.chunks, "parents": self.parents,
                "token_vectors": self.token_vectors, "problems": {k.value: v for k, v in self.problems.items()},
                "examples": {k.value: v for k, v in self.examples.items()}}


def verify_collection(store: MilvusStore, ref: CollectionRef, *, model: str, dim: int,
                      record: RecordSnapshot | None = None, tokens: TokenVectorStore | None = None,
                      on_rows: Callable[[str, int], None] | None = None) -> CollectionCheck:
    """`on_rows(step, rows)`: progress after each batch of rows read ("chunks", then "parents")."""
    scope = ref.scope
    check = CollectionCheck(label=f"{scope.tenant}:{ref.label}")
    if not store.open_existing(scope):
        return check
    chunk_ids = list(store.inventory(scope))
    # A partition-key tenant's rows sit in shared collections under tenant-prefixed keys.
    where = store.physical(scope)
    referenced_parents: set[str] = set()
    parent_of: dict[str, str] = {}
    fields = [*CHUNK_OUTPUT_FIELDS, "dense", *([MODALITY_FIELD] if store.stores_modality(scope) else [])]
    for row in _rows(store, where.chunks, [where.row_key(i) for i in chunk_ids], fields):
        check.chunks += 1
        referenced_parents.add(row["parent_key"])
        if row["parent_key"]:  # memory rows have none
            parent_of[row["id"]] = row["parent_key"]
        expected = content_hash(text=row["text"], title=row["title"], metadata=stored_metadata(row.get("metadata")),
                                source_url=row["source_url"], source_path=row["source_path"],
                                parent_key=row["parent_key"], model=model, keys=ref.config.content_keys.tag)
        if expected != row["content_hash"] and row.get("dense") is not None:
            # A chunk that brought its own vector: its hash covers that vector instead of the model.
            expected = content_hash(text=row["text"], title=row["title"],
                                    metadata=stored_metadata(row.get("metadata")), source_url=row["source_url"],
                                    source_path=row["source_path"], parent_key=row["parent_key"],
                                    vector=vector_digest(np.asarray(row["dense"], dtype=np.float32)),
                                    keys=ref.config.content_keys.tag)
        # An image row's hash covers the image file, which is not stored: only its vector is checked.
        if expected != row["content_hash"] and row.get(MODALITY_FIELD, "text") == "text":
            check.add(Finding.CONTENT_HASH, row["id"])
        problem = _vector_problem(row.get("dense"), dim)
        if problem:
            check.add(Finding.VECTOR, f"{row['id']}: {problem}")
        if on_rows is not None and check.chunks % _BATCH == 0:
            on_rows("chunks", check.chunks)
    parent_keys = list(store.parent_inventory(scope))
    for row in _rows(store, where.parents, [where.row_key(k) for k in parent_keys], PARENT_OUTPUT_FIELDS, key="key"):
        check.parents += 1
        expected = content_hash(text=row["text"], title=row["title"], metadata=stored_metadata(row.get("metadata")))
        if expected != row["content_hash"]:
            check.add(Finding.PARENT_HASH, row["key"])
        if where.logical_key(row["key"]) not in referenced_parents:
            check.add(Finding.ORPHAN_PARENT, row["key"])
        if on_rows is not None and check.parents % _BATCH == 0:
            on_rows("parents", check.parents)
    stored_parents = set(parent_keys)
    for row_id, parent_key in sorted(parent_of.items()):
        if parent_key not in stored_parents:
            check.add(Finding.ORPHAN_CHUNK, f"{row_id} (parent {parent_key})")
    if tokens is not None:
        known = set(chunk_ids)
        for row_id in tokens.row_ids(scope):
            check.token_vectors += 1
            if row_id not in known:
                check.add(Finding.ORPHAN_TOKENS, row_id)
    if record is not None:
        for name, actual in ((where.chunks, check.chunks), (where.parents, check.parents)):
            entry = record.collections.get(name)
            if entry is not None and entry.rows != actual:
                check.add(Finding.COUNT, f"{name}: {actual} rows, record says {entry.rows}")
    return check


def _rows(store: MilvusStore, collection: str, ids: Sequence[str], fields: list[str],
          key: str = "id") -> Iterator[Mapping[str, Any]]:
    # By primary key, never by pasting ids into an expression (see MilvusStore.inventory).
    for start in range(0, len(ids), _BATCH):
        yield from store.guard.get(collection, ids=list(ids[start:start + _BATCH]), output_fields=[key, *fields])


def _vector_problem(value: Any, dim: int) -> str | None:
    if value is None:
        return "no dense vector"
    vector = np.asarray(value, dtype=np.float64)
    if vector.shape != (dim,):
        return f"shape {vector.shape}, expected ({dim},)"
    if not np.all(np.isfinite(vector)):
        return "non-finite values"
    norm = float(np.linalg.norm(vector))
    if abs(norm - 1.0) > NORM_TOLERANCE:
        return f"norm {norm:.6g}, expected 1 (embedders L2-normalise)"
    return None
