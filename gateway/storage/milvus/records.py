"""Record collections (conversation turns, jobs): rows of one tenant, never searched by vector."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gateway.storage.milvus.loading import Loading
from gateway.storage.milvus.undo import count_deleted
from gateway.storage.schema import Scope


class Records(Loading):
    """Collections of one tenant's records, created on first use and read inside the boundary."""

    def ensure_records(self, scope: Scope, name: str, schema: Callable[[Any], Any],
                       index: Callable[[Any], Any]) -> None:
        """Create (if missing) and load a record collection; `schema`/`index` build its layout."""
        if name in self._ready:
            return
        with self._lock:
            if name in self._ready:
                return
            if not self._client.has_collection(name):
                self._client.create_collection(name, schema=schema(self._client), index_params=index(self._client))
            self._load(name)
            self._ready.add(name)

    def has_records(self, name: str) -> bool:
        """Whether a record collection exists; one this process opened needs no call to Milvus."""
        return name in self._ready or self._client.has_collection(name)

    def insert_records(self, scope: Scope, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert rows, stamped with the scope's tenant and namespace (never the caller's)."""
        stamped = [{**row, "tenant": scope.tenant, "namespace": scope.namespace} for row in rows]
        with self._client.batch():
            self._client.insert(name, stamped)
            self._client.flush(name)

    def query_records(self, scope: Scope, name: str, where: str | None, fields: Sequence[str],
                      limit: int) -> list[dict[str, Any]]:
        return list(self._client.query(name, filter=self._boundary(scope, where), output_fields=list(fields),
                                       limit=limit))

    def iterate_records(self, scope: Scope, name: str, key: str, fields: Sequence[str]) -> Iterable[dict[str, Any]]:
        """Every row of the scope in a record collection, paged by its primary key `key`."""
        return self._iterate(scope, name, key, list(fields))

    def drop_records(self, name: str) -> None:
        """Drop a record collection (a deleted tenant's); the next `ensure_records` creates it again."""
        with self._lock:
            if self._client.has_collection(name):
                self._client.drop_collection(name)
            self._ready.discard(name)

    def delete_records(self, scope: Scope, name: str, where: str | None) -> int:
        with self._client.batch():
            removed = count_deleted(self._client.delete(name, filter=self._boundary(scope, where)))
            self._client.flush(name)
        return removed
