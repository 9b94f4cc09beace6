"""Reading stored rows without search: inventories, counts, a source's chunks, parents."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gateway.storage.filters import literal
from gateway.storage.milvus.boundary import ID_BATCH
from gateway.storage.milvus.loading import Loading
from gateway.storage.milvus.rows import ParentRecord, Stored, StoredChunk, stored_chunk, stored_metadata
from gateway.storage.schema import CHUNK_OUTPUT_FIELDS, PARENT_OUTPUT_FIELDS, Scope


class Inventory(Loading):
    """What is stored in a scope, read by query (never by vector)."""

    def inventory(self, scope: Scope) -> dict[str, Stored]:
        """row id -> what is stored under it, for every chunk in the scope (no text, no vectors)."""
        where = self.physical(scope)
        return {where.logical_key(row["id"]): Stored(row["source_id"], row["content_hash"], int(row["created_at"]))
                for row in self._iterate(scope, where.chunks, "id", ["source_id", "content_hash", "created_at"])}

    def parent_inventory(self, scope: Scope) -> dict[str, Stored]:
        where = self.physical(scope)
        return {where.logical_key(row["key"]): Stored(row["source_id"], row["content_hash"], 0)
                for row in self._iterate(scope, where.parents, "key", ["source_id", "content_hash"])}

    def chunk_rows(self, scope: Scope, fields: Sequence[str]) -> Iterable[dict[str, Any]]:
        """Every chunk row of the scope with `fields` (no vectors), paged by key: admin statistics."""
        return self._iterate(scope, self.physical(scope).chunks, "id", list(fields))

    def count(self, scope: Scope) -> int:
        return self._count(scope, self.physical(scope).chunks)

    def source_chunks(self, scope: Scope, source_id: str, limit: int | None = None,
                      chunk_ids: Sequence[str] | None = None) -> list[StoredChunk]:
        """The source's chunks in chunk order; with `limit`, at most that many of them (any); with
        `chunk_ids`, only those."""
        where = f"source_id == {literal(source_id)}"
        if chunk_ids is not None:
            where += f" and chunk_id in [{', '.join(literal(c) for c in chunk_ids)}]"
        name = self.physical(scope).chunks
        bounded = {"limit": limit} if limit is not None else {}
        rows = self._client.query(name, filter=self._boundary(scope, where),
                                  output_fields=self._with_modality(name, CHUNK_OUTPUT_FIELDS), **bounded)
        chunks = [stored_chunk(row) for row in rows]
        return sorted(chunks, key=lambda c: _natural(c.chunk_id))

    def chunk_ids_of(self, scope: Scope, source_ids: Sequence[str]) -> dict[str, list[str]]:
        """source id -> its chunk ids in chunk order, for those of `source_ids` that have chunks; one
        `source_id in [...]` query per ID_BATCH sources, each value escaped."""
        found: dict[str, list[str]] = {}
        name = self.physical(scope).chunks
        unique = list(dict.fromkeys(source_ids))
        for start in range(0, len(unique), ID_BATCH):
            where = f"source_id in [{', '.join(literal(s) for s in unique[start:start + ID_BATCH])}]"
            for row in self._client.query(name, filter=self._boundary(scope, where),
                                          output_fields=["source_id", "chunk_id"]):
                found.setdefault(row["source_id"], []).append(row["chunk_id"])
        return {source: sorted(ids, key=_natural) for source, ids in found.items()}

    def parents(self, scope: Scope, keys: Sequence[str]) -> dict[str, ParentRecord]:
        found: dict[str, ParentRecord] = {}
        names = self.physical(scope)
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), ID_BATCH):
            batch = unique[start:start + ID_BATCH]
            where = f"key in [{', '.join(literal(names.row_key(k)) for k in batch)}]"
            for row in self._client.query(names.parents, filter=self._boundary(scope, where),
                                          output_fields=PARENT_OUTPUT_FIELDS):
                key = names.logical_key(row["key"])
                found[key] = ParentRecord(
                    key=key, source_id=row["source_id"], title=row["title"], text=row["text"],
                    content_hash=row["content_hash"], metadata=stored_metadata(row.get("metadata")))
        return found


def _natural(chunk_id: str) -> tuple[int, str]:
    return (int(chunk_id), "") if chunk_id.isdigit() else (1 << 62, chunk_id)
