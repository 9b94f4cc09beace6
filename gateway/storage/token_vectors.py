"""Per-chunk token vectors for late-interaction reranking, in one SQLite file per collection.

Milvus (lite or server) stores one dense vector per row, so a chunk's contextual token
vectors live beside it: `<dir>/<physical chunk collection>.sqlite`, one row per chunk id with
its content hash, the document token limit it was computed at, and a float16 matrix (tokens x
384, [CLS] and [SEP] dropped): 768 bytes a token, so about 195 KB for a 256-token chunk and
390 KB for a 512-token one (docs/pipelines.md has SciFact's measured figures). The file
is named from the tenant-scoped physical collection name, so one tenant's reranker can only
ever read its own rows, and every lookup is by the ids of hits the request already holds.

A row whose content hash no longer matches the chunk is stale and is recomputed on use.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gateway.storage.guard import storage_errors
from gateway.storage.milvus import is_embedded
from gateway.storage.schema import Scope

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    row_id TEXT PRIMARY KEY,
    source_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    max_tokens INTEGER NOT NULL,
    n INTEGER NOT NULL,
    dim INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS tokens_source ON tokens(source_id);
"""


class TokenVectorStore:
    """Read, write and delete token matrices keyed by chunk row id (checked by content hash)."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._connections: dict[str, sqlite3.Connection] = {}
        self._lock = threading.Lock()

    @property
    def directory(self) -> Path:
        return self._dir

    def _db(self, scope: Scope) -> sqlite3.Connection:
        name = scope.chunk_collection
        with self._lock:
            connection = self._connections.get(name)
            if connection is None:
                self._dir.mkdir(parents=True, exist_ok=True)
                connection = sqlite3.connect(self._dir / f"{name}.sqlite", check_same_thread=False,
                                             isolation_level=None)
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
                connection.executescript(_SCHEMA)
                self._connections[name] = connection
            return connection

    def get(self, scope: Scope, wanted: Sequence[tuple[str, str]], max_tokens: int) -> dict[str, np.ndarray]:
        """Matrices for (row_id, content_hash) pairs stored with that hash and token limit."""
        return {row_id: np.frombuffer(data, dtype=np.float16).reshape(n, dim)
                for row_id, n, dim, data in self._matching(scope, wanted, max_tokens, "n, dim, data")}

    def present(self, scope: Scope, wanted: Sequence[tuple[str, str]], max_tokens: int) -> set[str]:
        """The row ids among (row_id, content_hash) pairs stored with that hash and limit (no matrices read)."""
        return {row[0] for row in self._matching(scope, wanted, max_tokens)}

    def _matching(self, scope: Scope, wanted: Sequence[tuple[str, str]], max_tokens: int,
                  columns: str = "") -> list[tuple]:
        """Rows (row_id, *columns) whose stored content hash and token limit match `wanted`."""
        if not wanted or not self._exists(scope):
            return []
        hashes = dict(wanted)
        ids = list(hashes)
        select = f"row_id, content_hash{', ' + columns if columns else ''}"
        db = self._db(scope)
        out = []
        # SQLite's default limit on bound parameters is 999 in older builds.
        for start in range(0, len(ids), 900):
            part = ids[start:start + 900]
            with self._lock:
                rows = db.execute(f"SELECT {select} FROM tokens WHERE max_tokens = ? "
                                  f"AND row_id IN ({','.join('?' * len(part))})", [max_tokens, *part]).fetchall()
            out.extend((row[0], *row[2:]) for row in rows if hashes[row[0]] == row[1])
        return out

    @storage_errors("token vectors")
    def put(self, scope: Scope, rows: Iterable[tuple[str, str, str, np.ndarray]], max_tokens: int) -> int:
        """Store (row_id, source_id, content_hash, matrix) rows computed at `max_tokens`, replacing what was there."""
        values = [(row_id, source_id, content_hash, max_tokens, int(m.shape[0]), int(m.shape[1]),
                   np.ascontiguousarray(m, dtype=np.float16).tobytes())
                  for row_id, source_id, content_hash, m in rows]
        if not values:
            return 0
        db = self._db(scope)
        with self._lock:
            db.execute("BEGIN")
            db.executemany("INSERT OR REPLACE INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?)", values)
            db.execute("COMMIT")
        return len(values)

    @storage_errors("token vectors")
    def delete_rows(self, scope: Scope, row_ids: Iterable[str]) -> None:
        ids = [(row_id,) for row_id in row_ids]
        if ids and self._exists(scope):
            db = self._db(scope)
            with self._lock:
                db.executemany("DELETE FROM tokens WHERE row_id = ?", ids)

    @storage_errors("token vectors")
    def delete_source(self, scope: Scope, source_id: str) -> None:
        if self._exists(scope):
            db = self._db(scope)
            with self._lock:
                db.execute("DELETE FROM tokens WHERE source_id = ?", (source_id,))

    def count(self, scope: Scope) -> int:
        if not self._exists(scope):
            return 0
        db = self._db(scope)
        with self._lock:
            return int(db.execute("SELECT COUNT(*) FROM tokens").fetchone()[0])

    def drop(self, scope: Scope) -> None:
        name = scope.chunk_collection
        with self._lock:
            connection = self._connections.pop(name, None)
            if connection is not None:
                connection.close()
        for suffix in ("", "-wal", "-shm"):
            (self._dir / f"{name}.sqlite{suffix}").unlink(missing_ok=True)

    def _exists(self, scope: Scope) -> bool:
        return scope.chunk_collection in self._connections or (self._dir / f"{scope.chunk_collection}.sqlite").exists()

    def close(self) -> None:
        with self._lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()


@dataclass(frozen=True, slots=True)
class TokenTarget:
    """Where ingest writes token vectors, and at what document length."""

    store: TokenVectorStore
    max_tokens: int


def default_directory(milvus_uri: str) -> Path:
    """Beside a milvus-lite file (`x.db` -> `x.tokens/`); `./data/token-vectors` for a server."""
    if not is_embedded(milvus_uri):
        return Path("./data/token-vectors")
    path = Path(milvus_uri)
    return path.with_name(f"{path.stem}.tokens")
