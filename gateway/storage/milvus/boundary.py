"""The tenant boundary: the one function that scopes every read, search and delete, and paging
through a scope's rows inside it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable
from typing import Any

from milvus_lite.exceptions import MilvusLiteError

from gateway.errors import StorageUnavailable
from gateway.storage import bulk
from gateway.storage.analyzer import Analyzer
from gateway.storage.capabilities import Capabilities
from gateway.storage.filters import literal, scoped_expression
from gateway.storage.guard import RETRY_HINT, GuardedClient
from gateway.storage.indexes import DenseIndex
from gateway.storage.residency import Residency
from gateway.storage.schema import Layout, Physical, Scope

# Keeps one `in [...]` expression well under any server's expression-size limit.
ID_BATCH = 500
# Rows per page when reading a whole scope through a client (beside `gateway serve`, or a Milvus server):
# under Milvus's 16,384-row query window, and each page costs the server a pass over the collection
# (sorting its matching keys), so 8,000 rather than 2,000 is a quarter of those passes.
_PAGE = 8000


class Bounded:
    """The store's state, where a scope's rows live, and the boundary every expression goes through."""

    uri: str
    dim: int
    analyzer: Analyzer
    layout: Layout
    capabilities: Capabilities
    residency: Residency
    _client: GuardedClient
    # Chunk collections this process created or loaded; and those that store `modality` (schema.py).
    _ready: set[str]
    _modal: set[str]
    _lock: threading.Lock
    # Chunk collection -> its dense index policy (tenant file `index:`), and its dense index type as last seen.
    _policies: dict[str, DenseIndex]
    _indexes: dict[str, str]
    # Chunk collection -> its rows as counted when this process opened it (indexing.py, the search depth).
    _rows: dict[str, int]
    # Threads that wait on searches sent ahead (search.py).
    _ahead: ThreadPoolExecutor
    # milvus-lite (embedded or served): searches for keys only take the lean call (milvus/client.py).
    _lite: bool

    def physical(self, scope: Scope) -> Physical:
        """The Milvus collections holding the scope's rows (shared ones for partition-key tenants)."""
        return self.layout.physical(scope)

    @staticmethod
    def _boundary(scope: Scope, where: str | None) -> str:
        """The only place a tenant/namespace boundary is added to an expression.

        In a collection shared by partition-key tenants, `tenant == '<id>'` is also what makes
        Milvus search only that tenant's partition (it hashes the key as it did on insert).
        """
        return scoped_expression(scope.tenant, scope.namespace, where)

    def _iterate(self, scope: Scope, collection: str, key: str, fields: list[str]) -> Iterable[dict[str, Any]]:
        """Every row of the scope, paged by primary key.

        pymilvus's query_iterator pastes the last key into its next filter unescaped, and keys
        hold client-chosen source ids; here the key goes through `literal` like any value.
        `iterator=True` makes both engines return a page in key order (milvus-lite does not
        otherwise), which keyset paging needs.
        """
        output = list(dict.fromkeys([key, *fields]))
        engine = bulk.engine_collection(self._client.store_dir, collection)
        # The engine in this process: one pass, not a scan per page (storage/bulk.py).
        if engine is not None and bulk.is_loaded(engine):
            try:
                yield from bulk.scan(engine, self._boundary(scope, None), output, key, _PAGE)
            except (OSError, MilvusLiteError) as exc:
                raise StorageUnavailable(f"storage failed during query on {collection}: {type(exc).__name__}: "
                                         f"{exc}; {RETRY_HINT}") from exc
            return
        last: str | None = None
        while True:
            where = None if last is None else f"{key} > {literal(last)}"
            page = self._client.query(collection, filter=self._boundary(scope, where), output_fields=output,
                                      limit=_PAGE, iterator="True", reduce_stop_for_best="True")
            if not page:
                return
            yield from page
            if len(page) < _PAGE:
                return
            following = str(page[-1][key])
            if last is not None and following <= last:
                raise StorageUnavailable(f"paging {collection} by {key} did not advance past {last!r}; "
                                         "the engine returned rows out of key order")
            last = following

    def _count(self, scope: Scope, collection: str) -> int:
        """How many rows of the scope `collection` holds; in this process's engine, without reading
        them (storage/bulk.py, `count`)."""
        engine = bulk.engine_collection(self._client.store_dir, collection)
        if engine is not None and bulk.is_loaded(engine):
            try:
                return bulk.count(engine, self._boundary(scope, None))
            except (OSError, MilvusLiteError) as exc:
                raise StorageUnavailable(f"storage failed during count on {collection}: {type(exc).__name__}: "
                                         f"{exc}; {RETRY_HINT}") from exc
        rows = self._client.query(collection, filter=self._boundary(scope, None), output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def _physical_rows(self, collection: str) -> int | None:
        """Every row of `collection`, whatever the scope (None: no such collection); in this process's
        engine without reading them, as `_count`."""
        engine = bulk.engine_collection(self._client.store_dir, collection)
        if engine is not None and bulk.is_loaded(engine):
            return bulk.count(engine, None)
        if not self._client.has_collection(collection):
            return None
        return self._client.count_rows(collection)

    def scoped(self, scope: Scope, where: str | None) -> str:
        """`where` inside the scope's boundary, for companion collections (token vectors) that carry
        the same tenant and namespace fields; the boundary itself stays in `_boundary`."""
        return self._boundary(scope, where)
