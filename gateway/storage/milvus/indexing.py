"""A chunk collection's dense index: the one its policy wants for its size, switched while serving.

milvus-lite builds an index per segment, and searches a segment without one exactly (it did so
for every segment under FLAT). Switching index there is: release, drop the dense index, load
again (searches run from here on, exact), then create the new index, which milvus-lite builds
segment by segment while the collection stays loaded and searchable. Between the release and the
load, a search finds the collection released and the guarded client loads it and retries
(storage/guard.py); a drop that fails because such a search loaded it meanwhile is tried again.
A Milvus server cannot load a collection without a vector index, so there the new index is
created before the load, and searches of that collection wait for the build.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pymilvus import MilvusException

from gateway.errors import StorageUnavailable
from gateway.storage.indexes import DenseIndex, DenseIndexKind, IndexState
from gateway.storage.milvus.loading import DENSE_FIELD, Loading
from gateway.storage.schema import Scope

log = logging.getLogger(__name__)
# A search that finds the collection released loads it again, and a loaded collection's index cannot
# be dropped; three rounds of release-then-drop outlast that on a busy store.
_DROP_ATTEMPTS = 3


class Indexing(Loading):
    """The dense index each chunk collection has, and the switch to the one its policy wants."""

    def ensure(self, scope: Scope, dim: int | None = None, index: DenseIndex | None = None) -> None:
        """Loading.ensure; with `index`, the collection follows that policy from now on (created with
        the index it wants, or switched to it when it has another)."""
        if index is None:
            super().ensure(scope, dim)
            return
        self.set_index_policy(scope, index)
        super().ensure(scope, dim)
        self.reconcile_index(scope)

    def set_index_policy(self, scope: Scope, policy: DenseIndex) -> None:
        """The policy (tenant file `index:`) that writes to this scope's collection follow from now on."""
        self._policies[self.physical(scope).chunks] = policy

    def index_policy(self, scope: Scope) -> DenseIndex:
        return self._policies.get(self.physical(scope).chunks, DenseIndex())

    def dense_index(self, scope: Scope, limit: int = 10, *, cached: bool = False) -> IndexState | None:
        """The scope's dense index as built, with the search parameters a search of `limit` hits
        uses; None while the collection does not exist. `cached`: as this process last saw it (when
        it opened the collection or switched its index), without asking Milvus."""
        name = self.physical(scope).chunks
        index_type = self._indexes.get(name) or (None if cached else self._read_index(name))
        if index_type is None:
            return None
        policy = self._policies.get(name, DenseIndex())
        rows = self._collection_rows(name, policy, ask=not cached)
        return IndexState(index_type, policy.build_params(index_type), policy.search_params(index_type, limit, rows))

    def dense_search_params(self, name: str, limit: int) -> dict[str, Any]:
        """`params` of a dense search of collection `name`. milvus-lite ignores what its index does not
        read, so there both ef and nprobe go along, right even when another process switched the index."""
        policy = self._policies.get(name, DenseIndex())
        rows = self._collection_rows(name, policy)
        if self.capabilities.is_lite:
            return {**policy.search_params("HNSW", limit, rows), **policy.search_params("IVF_FLAT", limit, rows)}
        index_type = self._indexes.get(name) or self._read_index(name) or self.capabilities.dense_index
        return policy.search_params(index_type, limit, rows)

    def _collection_rows(self, name: str, policy: DenseIndex, *, ask: bool = True) -> int | None:
        """The rows of collection `name`, which the default HNSW search depth grows with (indexes.default_ef):
        as this process's last flush of it left them, else as counted when this process opened it
        (`ask`: count now if not counted yet). None when the policy sets its own ef, or the collection
        does not exist."""
        if policy.ef is not None:
            return None
        committed = self._client.committed_rows.get(name)
        if committed is not None:
            return committed
        if name not in self._rows and ask:
            rows = self._physical_rows(name)
            if rows is not None:
                self._rows[name] = rows
        return self._rows.get(name)

    def reconcile_index(self, scope: Scope, rows: int | None = None,
                        on_switch: Callable[[str, int], None] | None = None) -> IndexState | None:
        """Switch the scope's dense index to the one its policy wants for `rows` rows (counted when
        None); returns the index it has now. Shared collections (partition-key tenants) are left as
        they are: their index serves every tenant in them, whatever one tenant's file says.
        `on_switch` hears the index type and rows before a switch starts (a build can take minutes)."""
        where = self.physical(scope)
        if where.shared or (where.chunks not in self._ready and not self._client.has_collection(where.chunks)):
            return self.dense_index(scope)
        policy = self._policies.get(where.chunks, DenseIndex())
        if rows is None:
            rows = self._client.committed_rows.get(where.chunks)
        if rows is None:
            rows = self.count(scope)
        wanted = policy.index_type(rows, self.capabilities.dense_index)
        current = self._indexes.get(where.chunks) or self._read_index(where.chunks)
        if policy.kind is DenseIndexKind.AUTO and wanted == "FLAT" and current is not None:
            wanted = current  # auto grows into an index and keeps it when the collection shrinks
        if current != wanted:
            with self._lock:
                if self._read_index(where.chunks) != wanted:
                    if on_switch is not None:
                        on_switch(wanted, rows)
                    self._switch(where.chunks, policy, wanted, rows)
        return self.dense_index(scope)

    def _switch(self, name: str, policy: DenseIndex, index_type: str, rows: int) -> None:
        started = time.perf_counter()
        client = self._client
        for attempt in range(_DROP_ATTEMPTS):
            client.release_collection(name)
            try:
                client.drop_index(name, DENSE_FIELD)
                break
            except (MilvusException, StorageUnavailable):
                if not client.describe_index(name, DENSE_FIELD):
                    break  # another process dropped it
                if attempt == _DROP_ATTEMPTS - 1:
                    raise
        self._indexes.pop(name, None)
        params = client.prepare_index_params()
        # Milvus only honours index parameters nested as params={"params": {...}} (schema.chunk_index).
        params.add_index(DENSE_FIELD, index_type=index_type, metric_type="COSINE",
                         params={"params": policy.build_params(index_type)})
        if self.capabilities.is_lite:
            client.load_collection(name)
            self._create_index(name, params, index_type)
        else:
            self._create_index(name, params, index_type)
            client.load_collection(name)
        self._indexes[name] = index_type
        log.info("collection %s: dense index is now %s at %d rows (%.1f s)", name, index_type, rows,
                 time.perf_counter() - started)

    def _create_index(self, name: str, params: Any, index_type: str) -> None:
        """create_index, done once the collection has the index, whoever's call made it: a build takes
        minutes on a busy machine (334 s for 50,000 rows at load 15), the connection can drop meanwhile
        (gRPC's `too_many_pings` GOAWAY), and pymilvus then sends the call again, which finds the index
        the first call built ("index already exists")."""
        try:
            self._client.create_index(name, params)
        except (MilvusException, StorageUnavailable):
            if self._read_index(name) != index_type:
                raise
