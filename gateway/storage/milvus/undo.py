"""Deleting rows: chunks and parents by key, whole sources, a scope's rows, its collections."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from milvus_lite.exceptions import MilvusLiteError

from gateway.errors import StorageUnavailable
from gateway.storage import bulk
from gateway.storage.filters import literal
from gateway.storage.guard import RETRY_HINT
from gateway.storage.milvus.boundary import ID_BATCH, Bounded
from gateway.storage.milvus.rows import Removed
from gateway.storage.schema import Scope


# Rows a long delete leaves pending before it flushes them. milvus-lite checks every pending (unflushed)
# delete in Python on each search and each delete by filter, so a prune of 900,000 chunks beside
# `gateway serve` slowed as they piled up (py-spy: 96% of the server's time); flushed, they join the
# deletes it has indexed.
FLUSH_DELETED = 20_000


class Undo(Bounded):
    """Deletes, always inside the scope's boundary."""

    def delete_chunks(self, scope: Scope, row_ids: Iterable[str]) -> int:
        where = self.physical(scope)
        return self._delete_in(scope, where.chunks, "id", [where.row_key(i) for i in row_ids])

    def delete_parents(self, scope: Scope, keys: Iterable[str]) -> int:
        where = self.physical(scope)
        return self._delete_in(scope, where.parents, "key", [where.row_key(k) for k in keys])

    def delete_source(self, scope: Scope, source_id: str) -> Removed:
        """Delete every chunk and parent of one source, chunks first (so no search sees a chunk
        whose parent is gone); a repeat after a crash between the two removes the parents."""
        where, names = f"source_id == {literal(source_id)}", self.physical(scope)
        with self._client.batch():
            chunks = self._client.delete(names.chunks, filter=self._boundary(scope, where))
            self._client.flush(names.chunks)
        with self._client.batch():
            parents = self._client.delete(names.parents, filter=self._boundary(scope, where))
            self._client.flush(names.parents)
        return Removed(chunks=count_deleted(chunks), parents=count_deleted(parents))

    def delete_sources(self, scope: Scope, source_ids: Sequence[str],
                       on_rows: Callable[[str, int], None] | None = None) -> Removed:
        """`delete_source` for many: every chunk of them, then every parent, in `in [...]` batches of ID_BATCH.
        `on_rows(step, rows)` hears the rows deleted so far after each batch ("prune chunks", "prune parents")."""
        names = self.physical(scope)
        chunks = self._delete_in(scope, names.chunks, "source_id", list(source_ids), on_rows, "prune chunks")
        parents = self._delete_in(scope, names.parents, "source_id", list(source_ids), on_rows, "prune parents")
        return Removed(chunks=chunks, parents=parents)

    def _delete_in(self, scope: Scope, collection: str, key: str, values: list[str],
                   on_rows: Callable[[str, int], None] | None = None, step: str = "") -> int:
        engine = bulk.engine_collection(self._client.store_dir, collection) if values else None
        if engine is not None and bulk.is_loaded(engine):
            # milvus-lite scans the whole collection for each delete whose filter is more than `pk in
            # [...]` (any boundary clause is): the scope's rows are read once here instead, and
            # deleted by primary key, which it applies without a scan.
            pk, wanted = bulk.primary_key(engine), set(values)
            try:
                rows = [row[pk] for row in bulk.scan(engine, self._boundary(scope, None), [key], pk)
                        if row[key] in wanted]
            except (OSError, MilvusLiteError) as exc:
                raise StorageUnavailable(f"storage failed during delete on {collection}: {type(exc).__name__}: "
                                         f"{exc}; {RETRY_HINT}") from exc
            key, values, scoped = pk, rows, False
        else:
            scoped = True
        total = flushed = 0
        with self._client.batch():
            for start in range(0, len(values), ID_BATCH):
                batch = values[start:start + ID_BATCH]
                where = f"{key} in [{', '.join(literal(v) for v in batch)}]"
                where = self._boundary(scope, where) if scoped else where
                total += count_deleted(self._client.delete(collection, filter=where))
                if total - flushed >= FLUSH_DELETED:
                    self._client.flush(collection)
                    flushed = total
                if on_rows is not None:
                    on_rows(step, total)
            if values:
                self._client.flush(collection)
        return total

    def clear(self, scope: Scope) -> None:
        """Delete every chunk and parent row of the scope, keeping its collections (so readiness,
        the record and other worker processes that have them open see an empty collection)."""
        names = self.physical(scope)
        for name in (names.chunks, names.parents):
            if self._client.has_collection(name):
                with self._client.batch():
                    self._client.delete(name, filter=self._boundary(scope, None))
                    self._client.flush(name)


    def drop(self, scope: Scope) -> None:
        """Remove the scope's rows: its own collections, or its rows of the shared ones."""
        where = self.physical(scope)
        if where.shared:
            for name in (where.chunks, where.parents):
                if self._client.has_collection(name):
                    with self._client.batch():
                        self._client.delete(name, filter=self._boundary(scope, None))
                        self._client.flush(name)
            return
        for name in (where.chunks, where.parents):
            if self._client.has_collection(name):
                self._client.drop_collection(name)
        self._ready.discard(where.chunks)
        self._modal.discard(where.chunks)
        self._rows.pop(where.chunks, None)
        self.residency.forget(where.chunks)


def count_deleted(result: Any) -> int:
    if isinstance(result, dict):
        return int(result.get("delete_count", 0))
    try:
        return len(result)
    except TypeError:
        return 0
