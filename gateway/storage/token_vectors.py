"""Per-chunk token vectors for late-interaction reranking, in a companion Milvus collection.

Milvus stores one dense vector per chunk row, so a chunk's contextual token vectors (tokens x
384, [CLS] and [SEP] dropped, float16: 768 bytes a token) live in a companion collection of the
physical chunk collection, `gw_t_<...>` (named like `gw_c_<...>`, so one per tenant collection,
or shared exactly as the chunk collection is). They live in Milvus, not on one machine's disk,
because several processes serve one store (`gateway serve --workers N`, replicas next to a
Milvus server) and any of them may rerank any hit.

Row layout: milvus-lite 3.2 has no FLOAT16_VECTOR type, and one 256-token matrix (196 KB) is
more than a VARCHAR holds (65,535 bytes), so a matrix is split into pieces of `PIECE_TOKENS`
tokens, each a base64 VARCHAR row keyed `<tenant>:<row id>#<piece>`. Rows carry `tenant` and
`namespace`, and every query and delete goes through the store's one boundary function, so one
tenant's reranker can only read its own rows; lookups are by the ids of hits a request already
holds. A matrix whose content hash no longer matches the chunk is stale and recomputed on use.

Matrices read or written are kept in the process (`ArrayCache`, bounded in bytes, least recently
used first out) keyed by tenant, namespace, collection, row id, content hash and token limit: the
`evidence` pipeline reranks the same top hits again and again, and each read moved ~4 MB of base64
through the store and decoded it (9 ms of the store's CPU and about as much of the gateway's per
request). A key names the content it was computed from, so a kept matrix is never stale; a delete
or drop forgets the scope's matrices in the process that runs it all the same (other processes'
copies are never read again and age out). One
tenant's entries are never another's: a tenant cannot time another's reranks through it.

Token vectors written by older versions to SQLite files (`x.tokens/`) are not read any more:
re-running `gateway ingest` (or `gateway sync`) backfills them into Milvus, and rerank computes
any that are missing at query time.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pymilvus import DataType, MilvusException

from gateway.errors import StorageUnavailable
from gateway.storage.array_cache import ArrayCache
from gateway.storage.filters import literal
from gateway.storage.guard import is_loaded
from gateway.storage.milvus import MilvusStore, is_embedded
from gateway.storage.schema import MAX_ID, MAX_TEXT, Scope, add_placeholder_vector, physical_name, placeholder_index

# 40 tokens x 384 dims x 2 bytes = 30,720 bytes, 40,960 as base64: under VARCHAR's 65,535 bytes
# with room for wider models (up to 640 dims at this piece size).
PIECE_TOKENS = 40
# Row ids per `row_id in [...]` expression (a rerank reads at most a few dozen hits).
_ID_BATCH = 200
# Piece rows per query page: Milvus caps offset + limit at 16,384.
_PAGE = 8000
_FIELDS = ["row_id", "content_hash", "max_tokens", "piece", "pieces", "n", "dim", "data"]


def token_collection(scope: Scope) -> str:
    return physical_name(scope, "t")


class TokenVectorStore:
    """Read, write and delete token matrices keyed by chunk row id (checked by content hash)."""

    def __init__(self, store: MilvusStore, cache_bytes: int = 64 * 1024 * 1024) -> None:
        self._store = store
        self._ready: set[str] = set()
        self.cache: ArrayCache[tuple[Scope, str, str, int]] = ArrayCache(cache_bytes)

    @property
    def store(self) -> MilvusStore:
        return self._store

    def get(self, scope: Scope, wanted: Sequence[tuple[str, str]], max_tokens: int) -> dict[str, np.ndarray]:
        """Matrices for (row_id, content_hash) pairs stored with that hash and token limit."""
        found: dict[str, np.ndarray] = {}
        unread: list[tuple[str, str]] = []
        for row_id, content_hash in wanted:
            matrix = self.cache.get((scope, row_id, content_hash, max_tokens))
            if matrix is None:
                unread.append((row_id, content_hash))
            else:
                found[row_id] = matrix
        read = self._read(scope, unread, max_tokens, with_data=True)
        hashes = dict(unread)
        for row_id, matrix in read.items():
            self.cache.put((scope, row_id, hashes[row_id], max_tokens), matrix)
        return found | read

    def present(self, scope: Scope, wanted: Sequence[tuple[str, str]], max_tokens: int) -> set[str]:
        """The row ids among (row_id, content_hash) pairs stored with that hash and limit (no matrices read)."""
        return set(self._read(scope, wanted, max_tokens, with_data=False))

    def put(self, scope: Scope, rows: Iterable[tuple[str, str, str, np.ndarray]], max_tokens: int) -> int:
        """Store (row_id, source_id, content_hash, matrix) rows computed at `max_tokens`, replacing what was there."""
        rows = list(rows)
        if not rows:
            return 0
        name = self._ensure(scope)
        pieces = [piece for row in rows for piece in _pieces(scope, *row, max_tokens)]
        client = self._store.guard
        with client.batch():
            # A matrix may now have fewer pieces than the one it replaces: remove the old pieces first.
            self._delete_ids(scope, name, [row_id for row_id, *_ in rows], flush=False)
            for start in range(0, len(pieces), 64):
                client.upsert(name, pieces[start:start + 64])
            client.flush(name)
        for row_id, _, content_hash, matrix in rows:
            self.cache.put((scope, row_id, content_hash, max_tokens), np.array(matrix, dtype=np.float16))
        return len(rows)

    def delete_rows(self, scope: Scope, row_ids: Iterable[str]) -> None:
        self.cache.forget(scope)
        ids = list(row_ids)
        if ids and self._exists(scope):
            with self._store.guard.batch():
                self._delete_ids(scope, token_collection(scope), ids, flush=True)

    def delete_source(self, scope: Scope, source_id: str) -> None:
        self.cache.forget(scope)
        if self._exists(scope):
            name = token_collection(scope)
            client = self._store.guard
            with client.batch():
                client.delete(name, filter=self._store.scoped(scope, f"source_id == {literal(source_id)}"))
                client.flush(name)

    def delete_sources(self, scope: Scope, source_ids: Sequence[str]) -> None:
        self.cache.forget(scope)
        if source_ids and self._exists(scope):
            name = token_collection(scope)
            client = self._store.guard
            with client.batch():
                for start in range(0, len(source_ids), _ID_BATCH):
                    batch = source_ids[start:start + _ID_BATCH]
                    client.delete(name, filter=self._store.scoped(
                        scope, f"source_id in [{', '.join(literal(s) for s in batch)}]"))
                client.flush(name)

    def count(self, scope: Scope) -> int:
        """Chunks that have token vectors (any hash or limit)."""
        if not self._exists(scope):
            return 0
        rows = self._store.guard.query(token_collection(scope), filter=self._store.scoped(scope, "piece == 0"),
                                       output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def row_ids(self, scope: Scope) -> list[str]:
        """The chunk row id of every stored matrix (for `gateway verify`'s orphan check)."""
        if not self._exists(scope):
            return []
        # Keyset paging by primary key with every value escaped (MilvusStore._iterate).
        rows = self._store._iterate(scope, token_collection(scope), "id", ["row_id", "piece"])
        return sorted(str(row["row_id"]) for row in rows if int(row["piece"]) == 0)

    def drop(self, scope: Scope) -> None:
        self.cache.forget(scope)
        name = token_collection(scope)
        if self._store.guard.has_collection(name):
            self._store.guard.drop_collection(name)
        self._ready.discard(name)

    def close(self) -> None:
        """The collection belongs to the store; closing the store closes the connection."""

    # -- internals ------------------------------------------------------------------------

    def _read(self, scope: Scope, wanted: Sequence[tuple[str, str]], max_tokens: int, *,
              with_data: bool) -> dict[str, np.ndarray]:
        if not wanted or not self._exists(scope):
            return {}
        hashes = dict(wanted)
        ids = list(hashes)
        name = token_collection(scope)
        fields = _FIELDS if with_data else [f for f in _FIELDS if f != "data"]
        grouped: dict[str, list[dict]] = defaultdict(list)
        for start in range(0, len(ids), _ID_BATCH):
            batch = ids[start:start + _ID_BATCH]
            where = (f"max_tokens == {literal(max_tokens)} and "
                     f"row_id in [{', '.join(literal(i) for i in batch)}]")
            if not with_data:
                where += " and piece == 0"
            for row in self._query(scope, name, where, fields):
                if hashes.get(row["row_id"]) == row["content_hash"]:
                    grouped[row["row_id"]].append(row)
        if not with_data:
            return {row_id: np.empty(0) for row_id in grouped}
        return {row_id: matrix for row_id, parts in grouped.items()
                if (matrix := _assemble(parts)) is not None}

    def _query(self, scope: Scope, name: str, where: str, fields: list[str]) -> Iterable[dict]:
        offset = 0
        while True:
            page = self._store.guard.query(name, filter=self._store.scoped(scope, where), output_fields=fields,
                                           limit=_PAGE, offset=offset)
            yield from page
            if len(page) < _PAGE:
                return
            offset += _PAGE

    def _delete_ids(self, scope: Scope, name: str, ids: list[str], *, flush: bool) -> None:
        client = self._store.guard
        for start in range(0, len(ids), _ID_BATCH):
            batch = ids[start:start + _ID_BATCH]
            client.delete(name, filter=self._store.scoped(scope, f"row_id in [{', '.join(literal(i) for i in batch)}]"))
        if flush:
            client.flush(name)

    def _exists(self, scope: Scope) -> bool:
        name = token_collection(scope)
        if name in self._ready:
            return True
        # Another process may have created it since we last looked: ask, and load it if so.
        if not self._store.guard.has_collection(name):
            return False
        self._ensure(scope)
        return True

    def _ensure(self, scope: Scope) -> str:
        name = token_collection(scope)
        if name in self._ready:
            return name
        client = self._store.guard
        if not client.has_collection(name):
            try:
                client.create_collection(name, schema=_schema(client.raw), index_params=placeholder_index(client.raw))
            except (MilvusException, StorageUnavailable):
                # Two processes creating it at once: the other one won, which is as good.
                if not client.has_collection(name):
                    raise
        if not is_loaded(client, name):
            client.load_collection(name)
        self._ready.add(name)
        return name


def _pieces(scope: Scope, row_id: str, source_id: str, content_hash: str, matrix: np.ndarray,
            max_tokens: int) -> list[dict]:
    data = np.ascontiguousarray(matrix, dtype=np.float16)
    n, dim = (int(data.shape[0]), int(data.shape[1])) if data.ndim == 2 else (0, 0)
    count = max(1, -(-n // PIECE_TOKENS))
    return [{
        "id": f"{scope.tenant}:{row_id}#{piece}", "tenant": scope.tenant, "namespace": scope.namespace,
        "row_id": row_id, "source_id": source_id, "content_hash": content_hash, "max_tokens": max_tokens,
        "piece": piece, "pieces": count, "n": n, "dim": dim,
        "data": base64.b64encode(data[piece * PIECE_TOKENS:(piece + 1) * PIECE_TOKENS].tobytes()).decode("ascii"),
        "placeholder": [0.0, 0.0],
    } for piece in range(count)]


def _assemble(parts: list[dict]) -> np.ndarray | None:
    """One matrix from its pieces; None when a piece is missing (a write was interrupted): recompute."""
    parts = sorted(parts, key=lambda p: int(p["piece"]))
    first = parts[0]
    if [int(p["piece"]) for p in parts] != list(range(int(first["pieces"]))):
        return None
    n, dim = int(first["n"]), int(first["dim"])
    raw = b"".join(base64.b64decode(p["data"]) for p in parts)
    if len(raw) != n * dim * 2:
        return None
    return np.frombuffer(raw, dtype=np.float16).reshape(n, dim)


def _schema(client):
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=MAX_ID + 300)
    schema.add_field("tenant", DataType.VARCHAR, max_length=256)
    schema.add_field("namespace", DataType.VARCHAR, max_length=256)
    schema.add_field("row_id", DataType.VARCHAR, max_length=MAX_ID)
    schema.add_field("source_id", DataType.VARCHAR, max_length=MAX_ID)
    schema.add_field("content_hash", DataType.VARCHAR, max_length=80)
    schema.add_field("max_tokens", DataType.INT64)
    schema.add_field("piece", DataType.INT64)
    schema.add_field("pieces", DataType.INT64)
    schema.add_field("n", DataType.INT64)
    schema.add_field("dim", DataType.INT64)
    schema.add_field("data", DataType.VARCHAR, max_length=MAX_TEXT)
    add_placeholder_vector(schema)  # rows read by filter only (storage/schema.py)
    return schema


@dataclass(frozen=True, slots=True)
class TokenTarget:
    """Where ingest writes token vectors, and at what document length."""

    store: TokenVectorStore
    max_tokens: int


def default_directory(milvus_uri: str) -> Path:
    """Where older versions kept SQLite token vectors (`x.db` -> `x.tokens/`); `gateway backup` still
    copies such a directory if it exists, so a backup never loses them before a re-ingest."""
    if not is_embedded(milvus_uri):
        return Path("./data/token-vectors")
    path = Path(milvus_uri)
    return path.with_name(f"{path.stem}.tokens")
