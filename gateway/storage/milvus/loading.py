"""Creating and loading a scope's collections, and releasing idle ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.errors import StorageUnavailable
from gateway.storage.guard import is_loaded
from gateway.storage.indexes import DenseIndex
from gateway.storage.milvus.boundary import Bounded
from gateway.storage.residency import record_load
from gateway.storage.schema import (
    MODALITY_FIELD,
    Physical,
    Scope,
    chunk_index,
    chunk_schema,
    parent_index,
    parent_schema,
)

DENSE_FIELD = "dense"


class Loading(Bounded):
    """A scope's collections: created by a writer, loaded when first used, released when idle."""

    def exists(self, scope: Scope) -> bool:
        return self._client.has_collection(self.physical(scope).chunks)

    def ensure(self, scope: Scope, dim: int | None = None) -> None:
        """Create the scope's collections if missing, and load them (they come back released).

        `dim` is the collection's vector size when its encoder is not the store's (an image collection)."""
        where = self.physical(scope)
        if where.chunks in self._ready:
            return
        with self._lock:
            if where.chunks in self._ready:
                return
            client = self._client
            policy = self._policies.get(where.chunks, DenseIndex())
            index_type = policy.index_type(0, self.capabilities.dense_index)
            self._create(where.chunks, lambda: client.create_collection(
                where.chunks, schema=chunk_schema(client, dim or self.dim, partition_key=where.shared),
                index_params=chunk_index(client, index_type, policy.build_params(index_type))))
            self._create(where.parents, lambda: client.create_collection(
                where.parents, schema=parent_schema(client, partition_key=where.shared),
                index_params=parent_index(client)))
            self._open(where)

    def open_existing(self, scope: Scope) -> bool:
        """Load the scope's collections if they exist; False when nothing was ingested yet.

        Never creates: a reader that finds the chunks but not yet the parents is looking at a writer (perhaps
        another process) half way through `ensure`, and treats the scope as not ingested yet."""
        where = self.physical(scope)
        if where.chunks in self._ready:
            return True
        if not (self._client.has_collection(where.chunks) and self._client.has_collection(where.parents)):
            return False
        with self._lock:
            if where.chunks not in self._ready:
                self._open(where)
        return True

    def _create(self, name: str, create: Callable[[], None]) -> None:
        """Create a collection unless it exists; another process creating it at the same moment is no error."""
        if self._client.has_collection(name):
            return
        try:
            create()
        except StorageUnavailable:
            if not self._client.has_collection(name):
                raise

    def _open(self, where: Physical) -> None:
        started = time.perf_counter()
        loaded = [self._load(name) for name in (where.chunks, where.parents)]
        if any(loaded):
            record_load(where.chunks, time.perf_counter() - started)
        if MODALITY_FIELD in _field_names(self._client, where.chunks):
            self._modal.add(where.chunks)
        self._read_index(where.chunks)
        self._rows.pop(where.chunks, None)  # counted again on its next search: another process may have written
        self._ready.add(where.chunks)

    def release_idle(self, idle_s: float) -> list[str]:
        """Release the collections this process has not searched for `idle_s` seconds (their tenants
        are inactive); the next search loads them again. Shared collections stay loaded."""
        released = []
        for chunks, names in self.residency.idle(idle_s):
            with self._lock:
                if not self.residency.still_idle(chunks, idle_s):
                    continue  # searched meanwhile
                self._ready.discard(chunks)
                self.residency.forget(chunks)
                for name in names:
                    if self._client.has_collection(name):
                        self._client.release_collection(name)
            released.append(chunks)
        return released

    def is_loaded(self, scope: Scope) -> bool:
        """True when the scope's chunk collection exists and is loaded (asks Milvus every time)."""
        name = self.physical(scope).chunks
        return self._client.has_collection(name) and is_loaded(self._client, name)


    def _read_index(self, name: str) -> str | None:
        """The dense index type Milvus has for collection `name` (None: no such collection or index)."""
        if not self._client.has_collection(name):
            return None
        described = self._client.describe_index(name, DENSE_FIELD) or {}
        index_type = described.get("index_type")
        if index_type:
            self._indexes[name] = str(index_type).upper()
        return self._indexes.get(name)

    def _load(self, name: str) -> bool:
        if is_loaded(self._client, name):
            return False
        self._client.load_collection(name)
        return True

    def _searchable(self, scope: Scope) -> str | None:
        """The scope's chunk collection, loaded; None while nothing was ingested into it.

        A search never creates a collection: that is the writer's `ensure`, with the collection's own
        vector size, and a reader creating one raced a writer in another process."""
        where = self.physical(scope)
        if where.chunks not in self._ready and not self.open_existing(scope):
            return None
        if not where.shared:
            self.residency.touch(where.chunks, (where.chunks, where.parents))
        return where.chunks

    def stores_modality(self, scope: Scope) -> bool:
        """Whether the scope's chunk rows have a `modality` field (collections created since it exists)."""
        return self.physical(scope).chunks in self._modal

    def _with_modality(self, name: str, fields: list[str]) -> list[str]:
        return [*fields, MODALITY_FIELD] if name in self._modal else fields


def _field_names(client: Any, collection: str) -> set[str]:
    return {f["name"] for f in client.describe_collection(collection)["fields"]}

