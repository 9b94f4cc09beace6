"""The Milvus adapter: one code path for milvus-lite (a local path) and a Milvus server (a URI).

Every read, search and delete goes through :meth:`MilvusStore._boundary`, the one function
that adds the tenant and namespace boundary, taken from a server-side :class:`Scope`. Where a
scope's rows physically live (its own collections, or collections shared by partition-key
tenants) is the :class:`Layout`'s answer, asked only here.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from milvus_lite.exceptions import MilvusLiteError, SchemaValidationError
from pymilvus import MilvusClient, MilvusException
from pymilvus.client import entity_helper

from gateway.errors import ConfigError, StorageUnavailable
from gateway.retrieval.hit import chunk_row_id, split_row_id
from gateway.storage import bulk
from gateway.storage.analyzer import Analyzer
from gateway.storage.capabilities import Capabilities, detect
from gateway.storage.filters import literal, scoped_expression
from gateway.storage.guard import RETRY_HINT, GuardedClient, is_loaded
from gateway.storage.identifiers import relative_source_path
from gateway.storage.integrity import open_refusal
from gateway.storage.record import StorePaths, StoreRecord, WriteGate
from gateway.storage.residency import Residency, record_load
from gateway.storage.schema import (
    CHUNK_OUTPUT_FIELDS,
    MODALITY_FIELD,
    PARENT_OUTPUT_FIELDS,
    Layout,
    Physical,
    Scope,
    chunk_index,
    chunk_schema,
    parent_index,
    parent_schema,
)
from gateway.storage.server import embedded_secret

log = logging.getLogger(__name__)
_REMOTE_SCHEMES = ("http://", "https://", "tcp://", "grpc://", "unix:")
# Keeps one `in [...]` expression well under any server's expression-size limit.
_ID_BATCH = 500
# Rows per page when reading a whole scope; well under Milvus's 16,384-row query window.
_PAGE = 2000
# What a search always returns: a hit's identity. Other stored fields only when asked for
# (each costs engine CPU per candidate; see SearchOptions.fields).
_HIT_KEY_FIELDS = ("id", "tenant", "namespace", "source_id", "chunk_id")
# Rows per upsert message: with 64 KiB of text and 8 KiB of metadata a row, well under the
# 64 MiB gRPC message a Milvus server accepts.
_WRITE_BATCH = 256
# Rows per batch handed to milvus-lite's engine in this process (storage/bulk.py): 4,096 rows of
# 384 float32 and 1 KB of text are about 10 MB of Arrow buffers.
_ENGINE_BATCH = 4096

# pymilvus 3.0's row packing runs its string-array check on each VARCHAR value of a row, so it walks
# the value's characters (an isinstance and a len per character): half of a bulk load's CPU time at
# 400-character chunks. For a row value the check compares each character's length (1) with the
# field's limit and so can fail nothing; the server checks max_length itself.
entity_helper.CHECK_STR_ARRAY = False
# milvus-lite's memtable flush, column by column (storage/bulk.py).
bulk.patch_engine()


def is_embedded(uri: str) -> bool:
    """A path (not a URI) means milvus-lite, embedded in this process."""
    return not uri.startswith(_REMOTE_SCHEMES)


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A child chunk as ingest writes it."""

    source_id: str
    chunk_id: str
    parent_key: str
    text: str
    title: str
    content_hash: str
    created_at: int
    updated_at: int
    dense: np.ndarray
    source_url: str = ""
    source_path: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Text the BM25 index sees before analysis (title and chunk text).
    index_text: str = ""
    # What `dense` is computed from; an image chunk carries its decoded image until it is embedded.
    modality: str = "text"
    image: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ParentRecord:
    key: str
    source_id: str
    title: str
    text: str
    content_hash: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk row as read back, without vectors."""

    namespace: str
    source_id: str
    chunk_id: str
    parent_key: str
    text: str
    title: str
    source_url: str
    source_path: str
    content_hash: str
    created_at: int
    updated_at: int
    metadata: Mapping[str, Any]
    modality: str = "text"


@dataclass(frozen=True, slots=True)
class Stored:
    """What an ingest needs to know of a stored row to decide whether to rewrite it."""

    source_id: str
    content_hash: str
    created_at: int


@dataclass(frozen=True, slots=True)
class Removed:
    """Rows one delete removed."""

    chunks: int
    parents: int


class ScoredChunk:
    """A search's row and its score. The row's stored chunk is built when first read: a fused
    search returns ten of its hundred candidates, and only those need one."""

    __slots__ = ("score", "_row", "_chunk")

    def __init__(self, row: Mapping[str, Any], score: float) -> None:
        self._row = row
        self._chunk: StoredChunk | None = None
        self.score = score

    @property
    def chunk(self) -> StoredChunk:
        if self._chunk is None:
            self._chunk = _stored(self._row)
        return self._chunk

    @property
    def row_id(self) -> str:
        """The row's primary key in its physical collection."""
        return self._row["id"]

    @property
    def identity(self) -> tuple[str, str, str]:
        """(namespace, source id, chunk id): a row's identity within its collection."""
        row = self._row
        return (row["namespace"], row["source_id"], row["chunk_id"])

    @property
    def namespace(self) -> str:
        return self._row["namespace"]

    @property
    def source_id(self) -> str:
        return self._row["source_id"]

    @property
    def chunk_id(self) -> str:
        return self._row["chunk_id"]

    def __repr__(self) -> str:
        return f"ScoredChunk({self.namespace}/{self.source_id}/{self.chunk_id}, {self.score})"


class MilvusStore:
    """Chunk and parent collections for (tenant, namespace, collection) scopes."""

    def __init__(self, uri: str, *, token: str | None = None, dim: int = 384,
                 analyzer: Analyzer | None = None, layout: Layout = Layout(), max_chunks: int | None = None) -> None:
        self.uri = uri
        self.dim = dim
        # Chunks a collection may hold (GATEWAY_EMBEDDED_MAX_CHUNKS, milvus-lite only); ingest refuses more.
        self.max_chunks = max_chunks if is_embedded(uri) else None
        self.analyzer = analyzer or Analyzer()
        # Whether the engine can hold this layout is start-up's check (storage/capabilities.py).
        self.layout = layout
        self._client = _connect(uri, token)
        self.capabilities: Capabilities = detect(str(self._client.get_server_version()))
        self._ready: set[str] = set()
        # Chunk collections that store `modality` (created since the field exists; schema.py).
        self._modal: set[str] = set()
        self._lock = threading.Lock()
        self.residency = Residency()

    def close(self) -> None:
        self._client.close()

    @property
    def guard(self) -> GuardedClient:
        """The guarded client: its fault log, committed row counts and the gateway's record."""
        return self._client

    # -- collections -------------------------------------------------------------------

    def physical(self, scope: Scope) -> Physical:
        """The Milvus collections holding the scope's rows (shared ones for partition-key tenants)."""
        return self.layout.physical(scope)

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
            self._create(where.chunks, lambda: client.create_collection(
                where.chunks, schema=chunk_schema(client, dim or self.dim, partition_key=where.shared),
                index_params=chunk_index(client, self.capabilities.dense_index)))
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
        self.residency.forget(where.chunks)

    def _load(self, name: str) -> bool:
        if is_loaded(self._client, name):
            return False
        self._client.load_collection(name)
        return True

    # -- writes ------------------------------------------------------------------------

    def upsert_chunks(self, scope: Scope, chunks: Sequence[ChunkRecord]) -> None:
        if not chunks:
            return
        where = self.physical(scope)
        modal = where.chunks in self._modal
        if not modal and any(c.modality != "text" for c in chunks):
            raise ConfigError(f"collection {where.chunks} was created before rows stored their modality, so it holds "
                              "text only (and its vectors have the text model's size); ingest the images into a "
                              "collection of a new name")
        if self._insert_in_engine(scope, chunks, modal):
            return
        # Rows are built one message at a time: a round of a bulk load holds thousands of chunks, and a
        # row's vector as a list of Python floats is eight times its float32 array.
        rows = lambda batch: [{  # noqa: E731
            "id": where.row_key(chunk_row_id(scope.namespace, c.source_id, c.chunk_id)),
            "tenant": scope.tenant,
            "namespace": scope.namespace,
            "source_id": c.source_id,
            "chunk_id": c.chunk_id,
            "parent_key": c.parent_key,
            "text": c.text,
            "bm25_text": self.analyzer.analyse(c.index_text or c.text),
            "dense": np.asarray(c.dense, dtype=np.float32).tolist(),
            "title": c.title,
            "source_url": c.source_url,
            "source_path": c.source_path,
            "content_hash": c.content_hash,
            "created_at": c.created_at,
            "updated_at": c.updated_at,
            "metadata": dict(c.metadata),
            **({MODALITY_FIELD: c.modality} if modal else {}),
        } for c in batch]
        with self._client.batch():
            for start in range(0, len(chunks), _WRITE_BATCH):
                self._client.upsert(where.chunks, rows(chunks[start:start + _WRITE_BATCH]))
            # milvus-lite searches unflushed rows ~50x slower: flush after every batch.
            self._client.flush(where.chunks)

    def _insert_in_engine(self, scope: Scope, chunks: Sequence[ChunkRecord], modal: bool) -> bool:
        """Chunks straight into milvus-lite's engine when it runs in this process (storage/bulk.py);
        False when it does not, and the rows go through pymilvus."""
        where = self.physical(scope)
        engine = None if where.shared else bulk.engine_collection(self._client.store_dir, where.chunks)
        if engine is None:
            return False
        with self._client.batch():
            try:
                writer = bulk.EngineWriter(engine)
                for start in range(0, len(chunks), _ENGINE_BATCH):
                    batch = chunks[start:start + _ENGINE_BATCH]
                    writer.insert(bulk.chunk_columns(scope, where, batch, self.analyzer.analyse, modal, chunk_row_id))
            except SchemaValidationError:
                raise  # a row the engine refuses (a value over its length), as pymilvus's path raises it
            except (OSError, MilvusLiteError) as exc:
                raise StorageUnavailable(f"storage failed during insert on {where.chunks}: {type(exc).__name__}: "
                                         f"{exc}; {RETRY_HINT}") from exc
            self._client.flush(where.chunks)
        return True

    def upsert_parents(self, scope: Scope, parents: Sequence[ParentRecord]) -> None:
        if not parents:
            return
        where = self.physical(scope)
        rows = [{
            "key": where.row_key(p.key), "tenant": scope.tenant, "namespace": scope.namespace,
            "source_id": p.source_id, "title": p.title, "text": p.text,
            "content_hash": p.content_hash, "metadata": dict(p.metadata), "placeholder": [0.0, 0.0],
        } for p in parents]
        with self._client.batch():
            for start in range(0, len(rows), _WRITE_BATCH):
                self._client.upsert(where.parents, rows[start:start + _WRITE_BATCH])
            self._client.flush(where.parents)

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
        return Removed(chunks=_count(chunks), parents=_count(parents))

    def delete_sources(self, scope: Scope, source_ids: Sequence[str]) -> Removed:
        """`delete_source` for many: every chunk of them, then every parent, in `in [...]` batches of _ID_BATCH."""
        names = self.physical(scope)
        chunks = self._delete_in(scope, names.chunks, "source_id", list(source_ids))
        parents = self._delete_in(scope, names.parents, "source_id", list(source_ids))
        return Removed(chunks=chunks, parents=parents)

    def _delete_in(self, scope: Scope, collection: str, key: str, values: list[str]) -> int:
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
        total = 0
        with self._client.batch():
            for start in range(0, len(values), _ID_BATCH):
                batch = values[start:start + _ID_BATCH]
                where = f"{key} in [{', '.join(literal(v) for v in batch)}]"
                where = self._boundary(scope, where) if scoped else where
                total += _count(self._client.delete(collection, filter=where))
            if values:
                self._client.flush(collection)
        return total

    # -- reads -------------------------------------------------------------------------

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

    def clear(self, scope: Scope) -> None:
        """Delete every chunk and parent row of the scope, keeping its collections (so readiness,
        the record and other worker processes that have them open see an empty collection)."""
        names = self.physical(scope)
        for name in (names.chunks, names.parents):
            if self._client.has_collection(name):
                with self._client.batch():
                    self._client.delete(name, filter=self._boundary(scope, None))
                    self._client.flush(name)

    def count(self, scope: Scope) -> int:
        rows = self._client.query(self.physical(scope).chunks, filter=self._boundary(scope, None),
                                  output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def source_chunks(self, scope: Scope, source_id: str, limit: int | None = None) -> list[StoredChunk]:
        """The source's chunks in chunk order; with `limit`, at most that many of them (any)."""
        where = f"source_id == {literal(source_id)}"
        name = self.physical(scope).chunks
        bounded = {"limit": limit} if limit is not None else {}
        rows = self._client.query(name, filter=self._boundary(scope, where),
                                  output_fields=self._with_modality(name, CHUNK_OUTPUT_FIELDS), **bounded)
        chunks = [_stored(row) for row in rows]
        return sorted(chunks, key=lambda c: _natural(c.chunk_id))

    def parents(self, scope: Scope, keys: Sequence[str]) -> dict[str, ParentRecord]:
        found: dict[str, ParentRecord] = {}
        names = self.physical(scope)
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _ID_BATCH):
            batch = unique[start:start + _ID_BATCH]
            where = f"key in [{', '.join(literal(names.row_key(k)) for k in batch)}]"
            for row in self._client.query(names.parents, filter=self._boundary(scope, where),
                                          output_fields=PARENT_OUTPUT_FIELDS):
                key = names.logical_key(row["key"])
                found[key] = ParentRecord(
                    key=key, source_id=row["source_id"], title=row["title"], text=row["text"],
                    content_hash=row["content_hash"], metadata=stored_metadata(row.get("metadata")))
        return found

    def search_dense(self, scope: Scope, vector: np.ndarray, limit: int,
                     where: str | None = None, fields: Collection[str] | None = None) -> list[ScoredChunk]:
        name = self._searchable(scope)
        if name is None:
            return []
        params: dict[str, Any] = {"metric_type": "COSINE"}
        if self.capabilities.dense_index == "HNSW":
            params["params"] = {"ef": max(64, limit)}
        result = self._client.search(
            name, data=[np.asarray(vector, dtype=np.float32).tolist()],
            anns_field="dense", limit=limit, filter=self._boundary(scope, where),
            output_fields=self._with_modality(name, _searched_fields(fields)), search_params=params)
        # COSINE similarity is already "higher is better".
        return self._scored(scope, result[0], fields, float)

    def search_sparse(self, scope: Scope, text: str, limit: int,
                      where: str | None = None, fields: Collection[str] | None = None) -> list[ScoredChunk]:
        analysed = self.analyzer.analyse(text)
        name = self._searchable(scope) if analysed else None
        if name is None:
            return []
        result = self._client.search(
            name, data=[analysed], anns_field="sparse", limit=limit,
            filter=self._boundary(scope, where), output_fields=self._with_modality(name, _searched_fields(fields)),
            search_params={"metric_type": "BM25"})
        # milvus-lite returns BM25 as a negative distance, a Milvus server as a positive
        # score; BM25 is never negative, so its magnitude is the score on both engines.
        return self._scored(scope, result[0], fields, lambda distance: abs(float(distance)))

    def _scored(self, scope: Scope, hits: Iterable[Mapping[str, Any]], fields: Collection[str] | None,
                score: Callable[[Any], float]) -> list[ScoredChunk]:
        """A search's rows. A search for identities only fetched primary keys: the rest of a row's
        identity is in its key (`namespace/sourceId/chunkId`, after the tenant in a shared collection),
        and its tenant and namespace are the scope's, which the search's boundary clause required."""
        if not _keys_only(fields):
            return [ScoredChunk(h["entity"], score(h["distance"])) for h in hits]
        physical, prefix = self.physical(scope), f"{scope.namespace}/"
        scored = []
        for h in hits:
            entity = h["entity"]
            key = physical.logical_key(entity["id"])
            if not key.startswith(prefix):
                continue  # not a row of this scope's namespace, which the boundary clause already excluded
            source_id, chunk_id = split_row_id(scope.namespace, key)
            scored.append(ScoredChunk({**entity, "tenant": scope.tenant, "namespace": scope.namespace,
                                       "source_id": source_id, "chunk_id": chunk_id}, score(h["distance"])))
        return scored

    def fill(self, scope: Scope, rows: Sequence[ScoredChunk],
             fields: Collection[str] | None = None) -> list[ScoredChunk]:
        """`rows` of this scope's searches, fetched with identities only, with their stored `fields`
        (None: every one), by primary key: a fused search ranks a hundred rows and returns ten, and
        ten rows' text cost less to fetch than a hundred's. A row deleted since the search is left out.

        The lookup names primary keys only: on milvus-lite a boundary clause beside them made it scan
        the collection, and cost more than it saved. The keys come from a search that had the boundary,
        never from a caller, and each row found is checked against the boundary here."""
        name = self._searchable(scope) if rows else None
        if name is None:
            return []
        output = self._with_modality(name, _output_fields(fields))
        ids = list(dict.fromkeys(row.row_id for row in rows))
        found: dict[str, Mapping[str, Any]] = {}
        for start in range(0, len(ids), _ID_BATCH):
            where = f"id in [{', '.join(literal(key) for key in ids[start:start + _ID_BATCH])}]"
            for row in self._client.query(name, filter=where, output_fields=output):
                if row["tenant"] == scope.tenant and row["namespace"] == scope.namespace:
                    found[row["id"]] = row
        return [ScoredChunk(found[row.row_id], row.score) for row in rows if row.row_id in found]

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

    # -- the boundary ------------------------------------------------------------------

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

    def rebuild(self, scope: Scope, on_rows: Callable[[str, int], None] | None = None) -> int:
        """Rewrite the scope's chunk collection from its live rows; returns how many it kept.
        `on_rows(step, rows)` hears the progress after each page: step "copy" (into staging), then "rewrite".

        milvus-lite keeps deleted and replaced rows in its BM25 statistics (document count,
        average length, document frequencies), so sparse ranking drifts after many deletes and
        re-inserts (docs/operations.md). Rewriting the live rows recomputes them. The rows are
        first copied to a staging collection (`<name>__rebuild`), which is dropped only after the
        rewrite holds every row, so a crash mid-way leaves a full copy behind. Searches of this
        collection fail while it is rewritten: run it when the collection is not being served.
        """
        where = self.physical(scope)
        if where.shared:
            raise ConfigError(
                f"rebuild rewrites a whole collection, and tenant {scope.tenant!r} (isolation: partition_key) "
                f"shares {where.chunks} with other tenants; rebuild is for milvus-lite's BM25 statistics "
                "(isolation: collection), which a Milvus server does not need")
        source, staging = where.chunks, f"{where.chunks}__rebuild"
        fields = ["tenant", "namespace", "source_id", "chunk_id", "parent_key", "text", "bm25_text", "dense",
                  "title", "source_url", "source_path", "content_hash", "created_at", "updated_at", "metadata"]
        self.ensure(scope)
        fields = self._with_modality(source, fields)
        client = self._client

        def write(name: str, rows: Iterable[dict[str, Any]], step: str) -> int:
            """`rows` into a new collection `name`, a page at a time (a million rows' vectors as Python
            floats would not fit in memory); returns how many, checked against the collection's count."""
            if client.has_collection(name):
                client.drop_collection(name)
            written, page = 0, []
            for row in rows:
                page.append(row)
                if len(page) == _ENGINE_BATCH:
                    written += self._rewrite_page(name, page, written == 0, ["id", *fields])
                    page = []
                    if on_rows is not None:
                        on_rows(step, written)
            if page or written == 0:
                written += self._rewrite_page(name, page, written == 0, ["id", *fields])
                if on_rows is not None:
                    on_rows(step, written)
            client.flush(name)
            self._load(name)
            counted = client.query(name, filter=self._boundary(scope, None), output_fields=["count(*)"])
            held = int(counted[0]["count(*)"]) if counted else 0
            if held != written:
                raise StorageUnavailable(f"rebuilding {source}: {name} holds {held} rows, expected "
                                         f"{written}; {staging if name == source else source} is untouched")
            return written

        with self._lock:
            kept = write(staging, self._iterate(scope, source, "id", fields), "copy")
            self._ready.discard(source)
            if write(source, self._iterate(scope, staging, "id", fields), "rewrite") != kept:
                raise StorageUnavailable(f"rebuilding {source}: it was rewritten with other rows than the {kept} "
                                         f"{staging} holds; {staging} is untouched")
            self._ready.add(source)
            self._modal.add(source)  # chunk_schema has the field, so a rebuilt collection stores it
            client.drop_collection(staging)
        return kept

    def _rewrite_page(self, name: str, page: list[dict[str, Any]], first: bool, fields: list[str]) -> int:
        """One page of a rebuild's rows into `name`, which the first page creates (with its vectors' size)."""
        client = self._client
        if first:
            dim = len(page[0]["dense"]) if page else self.dim  # an image collection's encoder has its own size
            client.create_collection(name, schema=chunk_schema(client, dim),
                                     index_params=chunk_index(client, self.capabilities.dense_index))
        if not page:
            return 0
        engine = bulk.engine_collection(client.store_dir, name)
        if engine is not None:
            with client.batch():
                bulk.EngineWriter(engine).insert(bulk.rows_to_columns(page, fields))
            return len(page)
        for start in range(0, len(page), _WRITE_BATCH):
            client.insert(name, [{**row, "dense": [float(x) for x in row["dense"]]}
                                 for row in page[start:start + _WRITE_BATCH]])
        return len(page)

    def scoped(self, scope: Scope, where: str | None) -> str:
        """`where` inside the scope's boundary, for companion collections (token vectors) that carry
        the same tenant and namespace fields; the boundary itself stays in `_boundary`."""
        return self._boundary(scope, where)

    # -- record collections (conversation turns): rows of one tenant, never searched by vector --

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
            removed = _count(self._client.delete(name, filter=self._boundary(scope, where)))
            self._client.flush(name)
        return removed


# gRPC's default reconnect back-off grows to 120 s, so after a long Milvus outage the channel
# could sleep for minutes after the server is back; capped at 1 s, the first call after a
# restart succeeds within about a second.
# Keepalive: pymilvus pings every 10 s even with no call in flight, and a gRPC server's default
# policy (milvus-lite's server keeps it) allows one ping per 5 minutes without data: after ~30 s
# idle it answers GOAWAY "too_many_pings" and the next call on the shared channel failed with
# UNAVAILABLE. Ping only while calls are in flight, at most once a minute.
_CHANNEL = {"grpc.initial_reconnect_backoff_ms": 250, "grpc.min_reconnect_backoff_ms": 250,
              "grpc.max_reconnect_backoff_ms": 1000,
              "grpc.keepalive_permit_without_calls": 0, "grpc.keepalive_time_ms": 60_000}


# Connecting to a server that hangs must not hang the caller: the health probe reports it.
_CONNECT_TIMEOUT_S = 5.0


def _connect(uri: str, token: str | None) -> GuardedClient:
    """A guarded client; for milvus-lite, open failures are diagnosed (lock holder, read-only, damage)."""
    if not is_embedded(uri):
        try:
            return GuardedClient(MilvusClient(uri=uri, token=token or "", grpc_options=_CHANNEL), uri)
        except MilvusException as exc:
            raise StorageUnavailable(f"cannot connect to Milvus at {uri!r}: {exc.message}; {RETRY_HINT}") from exc
    paths = StorePaths.of(uri)
    paths.store.parent.mkdir(parents=True, exist_ok=True)
    served = _served(paths)
    if served is not None:
        return served
    # The embedded engine's gRPC server logs a traceback each time pymilvus asks for
    # AllocTimestamp (keyset paging with iterator=True does), which milvus-lite does not
    # implement; pymilvus then uses a client-side timestamp, correct for one process.
    logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
    # milvus-lite logs its own start-up failure with a traceback; the StorageUnavailable says more.
    logging.getLogger("milvus_lite.server_manager").setLevel(logging.CRITICAL)
    refusal = open_refusal(paths)
    if refusal is not None:
        raise StorageUnavailable(refusal)
    try:
        secret = embedded_secret(paths.store)
    except Exception as exc:  # milvus-lite's own errors on open (LOCK held, unreadable files) have no common base
        raise StorageUnavailable(open_refusal(paths) or (
            f"cannot open milvus-lite directory {str(paths.store)!r}: {type(exc).__name__}: {exc}")) from exc
    try:
        client = MilvusClient(uri=uri, token=secret, grpc_options=_CHANNEL)
    except MilvusException as exc:
        raise StorageUnavailable(open_refusal(paths) or (
            f"cannot open milvus-lite directory {str(paths.store)!r}: {exc.message}")) from exc
    return GuardedClient(client, uri, record=StoreRecord(paths.record), gate=WriteGate(paths.write_lock),
                         store_dir=paths.store)


def _served(paths: StorePaths) -> GuardedClient | None:
    """The same store through the milvus-lite server `gateway serve` runs for it (storage/server.py),
    with the record, write gate and directory probes of the embedded store; None when none runs.

    The server's secret comes from its location file (0600), not from GATEWAY_MILVUS_TOKEN."""
    from gateway.storage.health import StoreHealth
    from gateway.storage.server import ServerLocation, live_server

    location = live_server(paths)
    if location is None:
        return None

    def connect(where: ServerLocation) -> MilvusClient:
        try:
            # Dedicated: pymilvus otherwise shares one channel per address between clients, and
            # closing a hung one (GuardedClient does) would close it for all of them.
            return MilvusClient(uri=where.uri, token=where.token, grpc_options=_CHANNEL, dedicated=True,
                                timeout=_CONNECT_TIMEOUT_S)
        except MilvusException as exc:
            log.warning("cannot connect to the milvus-lite server for %s at %s: %s", paths.store, where.uri,
                        exc.message)
            raise StorageUnavailable(f"the milvus-lite server that `gateway serve` runs for this store does not "
                                     f"answer; {RETRY_HINT}") from exc

    health = StoreHealth(paths, location)
    try:
        try:
            client = connect(location)
        except StorageUnavailable as exc:
            # A process that starts while the server restarts (a rolling restart) waits for it, as calls do.
            health.lost(exc.message)
            client = connect(health.admit())
    except BaseException:
        health.close()
        raise
    return GuardedClient(client, location.uri, record=StoreRecord(paths.record), gate=WriteGate(paths.write_lock),
                         store_dir=paths.store, health=health, connect=connect)


def _count(result: Any) -> int:
    if isinstance(result, dict):
        return int(result.get("delete_count", 0))
    try:
        return len(result)
    except TypeError:
        return 0


def stored_metadata(value: Any) -> dict[str, Any]:
    """A row's metadata field as a dict (engines return it as JSON text or a mapping)."""
    if value is None:
        return {}
    if isinstance(value, (str, bytes)):
        return json.loads(value)
    return dict(value)


def _keys_only(fields: Collection[str] | None) -> bool:
    return fields is not None and all(f in _HIT_KEY_FIELDS for f in fields)


def _searched_fields(fields: Collection[str] | None) -> list[str]:
    """What a search fetches: the primary key alone when only identities are asked for (each other
    field, even the short identity ones, costs milvus-lite a retrieval per candidate), else
    `_output_fields`."""
    return ["id"] if _keys_only(fields) else _output_fields(fields)


def _output_fields(fields: Collection[str] | None) -> list[str]:
    """Every chunk field (None), or a hit's identity plus the named stored fields."""
    if fields is None:
        return CHUNK_OUTPUT_FIELDS
    unknown = set(fields).difference(CHUNK_OUTPUT_FIELDS)
    if unknown:
        raise ValueError(f"unknown chunk fields {sorted(unknown)}; known: {CHUNK_OUTPUT_FIELDS}")
    return [f for f in CHUNK_OUTPUT_FIELDS if f in _HIT_KEY_FIELDS or f in fields]


def _stored(row: Mapping[str, Any]) -> StoredChunk:
    """A stored chunk; a field the search did not fetch is empty (see `_output_fields`)."""
    return StoredChunk(
        namespace=row["namespace"], source_id=row["source_id"], chunk_id=row["chunk_id"],
        parent_key=row.get("parent_key", ""), text=row.get("text", ""), title=row.get("title", ""),
        source_url=row.get("source_url", ""),
        source_path=relative_source_path(row.get("source_path", ""), row["source_id"]),
        content_hash=row.get("content_hash", ""), created_at=int(row.get("created_at", 0)),
        updated_at=int(row.get("updated_at", 0)), metadata=stored_metadata(row.get("metadata")),
        modality=row.get(MODALITY_FIELD) or "text")


def _field_names(client: Any, collection: str) -> set[str]:
    return {f["name"] for f in client.describe_collection(collection)["fields"]}


def _natural(chunk_id: str) -> tuple[int, str]:
    return (int(chunk_id), "") if chunk_id.isdigit() else (1 << 62, chunk_id)
