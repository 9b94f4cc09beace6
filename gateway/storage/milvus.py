"""The Milvus adapter: one code path for milvus-lite (a local path) and a Milvus server (a URI).

Every read, search and delete goes through :meth:`MilvusStore._boundary`, the one function
that adds the tenant and namespace boundary, taken from a server-side :class:`Scope`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pymilvus import MilvusClient, MilvusException

from gateway.errors import StorageUnavailable
from gateway.retrieval.hit import chunk_row_id
from gateway.storage.analyzer import Analyzer
from gateway.storage.filters import literal, scoped_expression
from gateway.storage.guard import RETRY_HINT, GuardedClient
from gateway.storage.integrity import open_refusal
from gateway.storage.record import StorePaths, StoreRecord, WriteGate
from gateway.storage.schema import (
    CHUNK_OUTPUT_FIELDS,
    PARENT_OUTPUT_FIELDS,
    Scope,
    chunk_index,
    chunk_schema,
    parent_index,
    parent_schema,
)

log = logging.getLogger(__name__)
_REMOTE_SCHEMES = ("http://", "https://", "tcp://", "grpc://", "unix:")
# Keeps one `in [...]` expression well under any server's expression-size limit.
_ID_BATCH = 500
# Rows per page when reading a whole scope; well under Milvus's 16,384-row query window.
_PAGE = 2000
# Rows per upsert message: with 64 KiB of text and 8 KiB of metadata a row, well under the
# 64 MiB gRPC message a Milvus server accepts.
_WRITE_BATCH = 256


def is_embedded(uri: str) -> bool:
    """A path (not a URI) means milvus-lite, embedded in this process."""
    return not uri.startswith(_REMOTE_SCHEMES)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the engine behind the URI can do, detected once at start-up."""

    engine: str
    version: str
    dense_index: str
    partitions: bool

    @property
    def is_lite(self) -> bool:
        return self.engine == "milvus-lite"


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


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    chunk: StoredChunk
    score: float


class MilvusStore:
    """Chunk and parent collections for (tenant, namespace, collection) scopes."""

    def __init__(self, uri: str, *, token: str | None = None, dim: int = 384,
                 analyzer: Analyzer | None = None) -> None:
        self.uri = uri
        self.dim = dim
        self.analyzer = analyzer or Analyzer()
        self._client = _connect(uri, token)
        version = str(self._client.get_server_version())
        lite = version.startswith("milvus_lite") or version.startswith("milvus-lite")
        self.capabilities = Capabilities(
            engine="milvus-lite" if lite else "milvus",
            version=version,
            dense_index="FLAT" if lite else "HNSW",
            partitions=not lite,
        )
        self._ready: set[str] = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        self._client.close()

    @property
    def guard(self) -> GuardedClient:
        """The guarded client: its fault log, committed row counts and the gateway's record."""
        return self._client

    # -- collections -------------------------------------------------------------------

    def exists(self, scope: Scope) -> bool:
        return self._client.has_collection(scope.chunk_collection)

    def ensure(self, scope: Scope) -> None:
        """Create the scope's collections if missing, and load them (they come back released)."""
        if scope.chunk_collection in self._ready:
            return
        with self._lock:
            if scope.chunk_collection in self._ready:
                return
            client = self._client
            if not client.has_collection(scope.chunk_collection):
                client.create_collection(scope.chunk_collection, schema=chunk_schema(client, self.dim),
                                         index_params=chunk_index(client, self.capabilities.dense_index))
            if not client.has_collection(scope.parent_collection):
                client.create_collection(scope.parent_collection, schema=parent_schema(client),
                                         index_params=parent_index(client))
            for name in (scope.chunk_collection, scope.parent_collection):
                self._load(name)
            self._ready.add(scope.chunk_collection)

    def open_existing(self, scope: Scope) -> bool:
        """Load the scope's collections if they exist; False when nothing was ingested yet."""
        if scope.chunk_collection in self._ready:
            return True
        if not self.exists(scope):
            return False
        self.ensure(scope)
        return True

    def is_loaded(self, scope: Scope) -> bool:
        """True when the scope's chunk collection exists and is loaded (asks Milvus every time)."""
        return self._client.has_collection(scope.chunk_collection) and self._loaded(scope.chunk_collection)

    def drop(self, scope: Scope) -> None:
        for name in (scope.chunk_collection, scope.parent_collection):
            if self._client.has_collection(name):
                self._client.drop_collection(name)
        self._ready.discard(scope.chunk_collection)

    def _load(self, name: str) -> None:
        if not self._loaded(name):
            self._client.load_collection(name)

    def _loaded(self, name: str) -> bool:
        state = str(self._client.get_load_state(name).get("state"))  # LoadState.Loaded / NotLoad / Loading
        return state.endswith("Loaded") and "Not" not in state

    # -- writes ------------------------------------------------------------------------

    def upsert_chunks(self, scope: Scope, chunks: Sequence[ChunkRecord]) -> None:
        if not chunks:
            return
        rows = [{
            "id": chunk_row_id(scope.namespace, c.source_id, c.chunk_id),
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
        } for c in chunks]
        with self._client.batch():
            for start in range(0, len(rows), _WRITE_BATCH):
                self._client.upsert(scope.chunk_collection, rows[start:start + _WRITE_BATCH])
            # milvus-lite searches unflushed rows ~50x slower: flush after every batch.
            self._client.flush(scope.chunk_collection)

    def upsert_parents(self, scope: Scope, parents: Sequence[ParentRecord]) -> None:
        if not parents:
            return
        rows = [{
            "key": p.key, "tenant": scope.tenant, "namespace": scope.namespace,
            "source_id": p.source_id, "title": p.title, "text": p.text,
            "content_hash": p.content_hash, "metadata": dict(p.metadata), "placeholder": [0.0, 0.0],
        } for p in parents]
        with self._client.batch():
            for start in range(0, len(rows), _WRITE_BATCH):
                self._client.upsert(scope.parent_collection, rows[start:start + _WRITE_BATCH])
            self._client.flush(scope.parent_collection)

    def delete_chunks(self, scope: Scope, row_ids: Iterable[str]) -> int:
        return self._delete_in(scope, scope.chunk_collection, "id", list(row_ids))

    def delete_parents(self, scope: Scope, keys: Iterable[str]) -> int:
        return self._delete_in(scope, scope.parent_collection, "key", list(keys))

    def delete_source(self, scope: Scope, source_id: str) -> Removed:
        """Delete every chunk and parent of one source, chunks first (so no search sees a chunk
        whose parent is gone); a repeat after a crash between the two removes the parents."""
        where = f"source_id == {literal(source_id)}"
        with self._client.batch():
            chunks = self._client.delete(scope.chunk_collection, filter=self._boundary(scope, where))
            self._client.flush(scope.chunk_collection)
        with self._client.batch():
            parents = self._client.delete(scope.parent_collection, filter=self._boundary(scope, where))
            self._client.flush(scope.parent_collection)
        return Removed(chunks=_count(chunks), parents=_count(parents))

    def _delete_in(self, scope: Scope, collection: str, key: str, values: list[str]) -> int:
        total = 0
        with self._client.batch():
            for start in range(0, len(values), _ID_BATCH):
                batch = values[start:start + _ID_BATCH]
                where = f"{key} in [{', '.join(literal(v) for v in batch)}]"
                total += _count(self._client.delete(collection, filter=self._boundary(scope, where)))
            if values:
                self._client.flush(collection)
        return total

    # -- reads -------------------------------------------------------------------------

    def inventory(self, scope: Scope) -> dict[str, Stored]:
        """row id -> what is stored under it, for every chunk in the scope (no text, no vectors)."""
        return {row["id"]: Stored(row["source_id"], row["content_hash"], int(row["created_at"]))
                for row in self._iterate(scope, scope.chunk_collection, "id",
                                         ["source_id", "content_hash", "created_at"])}

    def parent_inventory(self, scope: Scope) -> dict[str, Stored]:
        return {row["key"]: Stored(row["source_id"], row["content_hash"], 0)
                for row in self._iterate(scope, scope.parent_collection, "key", ["source_id", "content_hash"])}

    def count(self, scope: Scope) -> int:
        rows = self._client.query(scope.chunk_collection, filter=self._boundary(scope, None),
                                  output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def source_chunks(self, scope: Scope, source_id: str) -> list[StoredChunk]:
        where = f"source_id == {literal(source_id)}"
        rows = self._client.query(scope.chunk_collection, filter=self._boundary(scope, where),
                                  output_fields=CHUNK_OUTPUT_FIELDS)
        chunks = [_stored(row) for row in rows]
        return sorted(chunks, key=lambda c: _natural(c.chunk_id))

    def parents(self, scope: Scope, keys: Sequence[str]) -> dict[str, ParentRecord]:
        found: dict[str, ParentRecord] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _ID_BATCH):
            batch = unique[start:start + _ID_BATCH]
            where = f"key in [{', '.join(literal(k) for k in batch)}]"
            for row in self._client.query(scope.parent_collection, filter=self._boundary(scope, where),
                                          output_fields=PARENT_OUTPUT_FIELDS):
                found[row["key"]] = ParentRecord(
                    key=row["key"], source_id=row["source_id"], title=row["title"], text=row["text"],
                    content_hash=row["content_hash"], metadata=_metadata(row.get("metadata")))
        return found

    def search_dense(self, scope: Scope, vector: np.ndarray, limit: int,
                     where: str | None = None) -> list[ScoredChunk]:
        params: dict[str, Any] = {"metric_type": "COSINE"}
        if self.capabilities.dense_index == "HNSW":
            params["params"] = {"ef": max(64, limit)}
        result = self._client.search(
            scope.chunk_collection, data=[np.asarray(vector, dtype=np.float32).tolist()],
            anns_field="dense", limit=limit, filter=self._boundary(scope, where),
            output_fields=CHUNK_OUTPUT_FIELDS, search_params=params)
        # COSINE similarity is already "higher is better".
        return [ScoredChunk(_stored(h["entity"]), float(h["distance"])) for h in result[0]]

    def search_sparse(self, scope: Scope, text: str, limit: int,
                      where: str | None = None) -> list[ScoredChunk]:
        analysed = self.analyzer.analyse(text)
        if not analysed:
            return []
        result = self._client.search(
            scope.chunk_collection, data=[analysed], anns_field="sparse", limit=limit,
            filter=self._boundary(scope, where), output_fields=CHUNK_OUTPUT_FIELDS,
            search_params={"metric_type": "BM25"})
        # milvus-lite returns BM25 as a negative distance, a Milvus server as a positive
        # score; BM25 is never negative, so its magnitude is the score on both engines.
        return [ScoredChunk(_stored(h["entity"]), abs(float(h["distance"]))) for h in result[0]]

    # -- the boundary ------------------------------------------------------------------

    @staticmethod
    def _boundary(scope: Scope, where: str | None) -> str:
        """The only place a tenant/namespace boundary is added to an expression."""
        return scoped_expression(scope.tenant, scope.namespace, where)

    def _iterate(self, scope: Scope, collection: str, key: str, fields: list[str]) -> Iterable[dict[str, Any]]:
        """Every row of the scope, paged by primary key.

        pymilvus's query_iterator pastes the last key into its next filter unescaped, and keys
        hold client-chosen source ids; here the key goes through `literal` like any value.
        `iterator=True` makes both engines return a page in key order (milvus-lite does not
        otherwise), which keyset paging needs.
        """
        output = list(dict.fromkeys([key, *fields]))
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

    def rebuild(self, scope: Scope) -> int:
        """Rewrite the scope's chunk collection from its live rows; returns how many it kept.

        milvus-lite keeps deleted and replaced rows in its BM25 statistics (document count,
        average length, document frequencies), so sparse ranking drifts after many deletes and
        re-inserts (docs/operations.md). Rewriting the live rows recomputes them. The rows are
        first copied to a staging collection (`<name>__rebuild`), which is dropped only after the
        rewrite holds every row, so a crash mid-way leaves a full copy behind. Searches of this
        collection fail while it is rewritten: run it when the collection is not being served.
        """
        source, staging = scope.chunk_collection, f"{scope.chunk_collection}__rebuild"
        fields = ["tenant", "namespace", "source_id", "chunk_id", "parent_key", "text", "bm25_text", "dense",
                  "title", "source_url", "source_path", "content_hash", "created_at", "updated_at", "metadata"]
        self.ensure(scope)
        rows = [{**row, "dense": [float(x) for x in row["dense"]]}
                for row in self._iterate(scope, source, "id", fields)]
        client = self._client

        def write(name: str) -> None:
            if client.has_collection(name):
                client.drop_collection(name)
            client.create_collection(name, schema=chunk_schema(client, self.dim),
                                     index_params=chunk_index(client, self.capabilities.dense_index))
            for start in range(0, len(rows), _WRITE_BATCH):
                client.insert(name, rows[start:start + _WRITE_BATCH])
            client.flush(name)
            self._load(name)
            counted = client.query(name, filter=self._boundary(scope, None), output_fields=["count(*)"])
            written = counted[0]["count(*)"] if counted else 0
            if int(written) != len(rows):
                raise StorageUnavailable(f"rebuilding {source}: {name} holds {written} rows, expected "
                                         f"{len(rows)}; {staging if name == source else source} is untouched")

        with self._lock:
            write(staging)
            self._ready.discard(source)
            write(source)
            self._ready.add(source)
            client.drop_collection(staging)
        return len(rows)

    def scoped(self, scope: Scope, where: str | None) -> str:
        """`where` inside the scope's boundary, for companion collections (token vectors) that carry
        the same tenant and namespace fields; the boundary itself stays in `_boundary`."""
        return self._boundary(scope, where)


# gRPC's default reconnect back-off grows to 120 s, so after a long Milvus outage the channel
# could sleep for minutes after the server is back; capped at 1 s, the first call after a
# restart succeeds within about a second.
_RECONNECT = {"grpc.initial_reconnect_backoff_ms": 250, "grpc.min_reconnect_backoff_ms": 250,
              "grpc.max_reconnect_backoff_ms": 1000}


def _connect(uri: str, token: str | None) -> GuardedClient:
    """A guarded client; for milvus-lite, open failures are diagnosed (lock holder, read-only, damage)."""
    if not is_embedded(uri):
        try:
            return GuardedClient(MilvusClient(uri=uri, token=token or "", grpc_options=_RECONNECT), uri)
        except MilvusException as exc:
            raise StorageUnavailable(f"cannot connect to Milvus at {uri!r}: {exc.message}; {RETRY_HINT}") from exc
    paths = StorePaths.of(uri)
    paths.store.parent.mkdir(parents=True, exist_ok=True)
    served = _served(paths, token)
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
        client = MilvusClient(uri=uri, token=token or "")
    except MilvusException as exc:
        raise StorageUnavailable(open_refusal(paths) or (
            f"cannot open milvus-lite directory {str(paths.store)!r}: {exc.message}")) from exc
    return GuardedClient(client, uri, record=StoreRecord(paths.record), gate=WriteGate(paths.write_lock),
                         store_dir=paths.store)


# milvus-lite's gRPC server keeps grpcio's defaults: pings at most every 5 min, none without a call.
# pymilvus pings every 10 s, so the server answered GOAWAY "too_many_pings" and the channel
# reconnected; on loopback keepalive buys nothing, so ping rarely and only during calls.
_LITE_KEEPALIVE = {"grpc.keepalive_time_ms": 330_000, "grpc.keepalive_permit_without_calls": False}


def _served(paths: StorePaths, token: str | None) -> GuardedClient | None:
    """The same store through the milvus-lite server `gateway serve` runs for it (storage/server.py),
    with the record, write gate and directory probes of the embedded store; None when none runs."""
    from gateway.storage.server import live_server

    location = live_server(paths)
    if location is None:
        return None
    try:
        client = MilvusClient(uri=location.uri, token=token or "", grpc_options={**_RECONNECT, **_LITE_KEEPALIVE})
    except MilvusException as exc:
        raise StorageUnavailable(f"the milvus-lite server that `gateway serve` runs for {str(paths.store)!r} "
                                 f"at {location.uri} does not answer: {exc.message}; {RETRY_HINT}") from exc
    return GuardedClient(client, location.uri, record=StoreRecord(paths.record), gate=WriteGate(paths.write_lock),
                         store_dir=paths.store)


def _count(result: Any) -> int:
    if isinstance(result, dict):
        return int(result.get("delete_count", 0))
    try:
        return len(result)
    except TypeError:
        return 0


def _metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, (str, bytes)):
        return json.loads(value)
    return dict(value)


def _stored(row: Mapping[str, Any]) -> StoredChunk:
    return StoredChunk(
        namespace=row["namespace"], source_id=row["source_id"], chunk_id=row["chunk_id"],
        parent_key=row["parent_key"], text=row["text"], title=row["title"],
        source_url=row["source_url"], source_path=row["source_path"],
        content_hash=row["content_hash"], created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]), metadata=_metadata(row.get("metadata")))


def _natural(chunk_id: str) -> tuple[int, str]:
    return (int(chunk_id), "") if chunk_id.isdigit() else (1 << 62, chunk_id)
