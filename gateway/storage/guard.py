"""One place where every Milvus failure becomes StorageUnavailable, and released collections come back.

`GuardedClient` wraps the pymilvus client that `MilvusStore` uses, so no storage call can leak a
MilvusException, a gRPC error or an OSError (full disk, read-only or vanished directory) to a
client as INTERNAL. A collection found released or unloaded (a Milvus or milvus-lite server
restarted) is loaded again and the call retried once, so the first search after storage comes
back succeeds without a gateway restart. Writes pass the backup's write gate and, once a
flush commits them, update the gateway's record of row counts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymilvus import MilvusException
from pymilvus.exceptions import DataTypeNotMatchException, ParamError

from gateway.errors import StorageUnavailable
from gateway.storage.integrity import describe_os_error, file_hashes, write_problem
from gateway.storage.record import StoreRecord, WriteGate

log = logging.getLogger(__name__)

# Long enough for a Milvus (or milvus-lite server) restart to finish loading collections.
RETRY_AFTER_S = 5
RETRY_HINT = f"retry in {RETRY_AFTER_S} s; GET /readyz answers 200 again once storage is back"
_WRITES = frozenset({"insert", "upsert", "delete", "flush", "create_collection", "drop_collection"})
# Calls that read collection state: a released collection is not a failure for them.
_NO_RELOAD = frozenset({"load_collection", "release_collection", "get_load_state", "has_collection",
                        "list_collections", "drop_collection", "create_collection", "close",
                        "get_server_version"})
# Milvus's "collection not loaded" (101); milvus-lite says "in state 'released'; call load()".
_NOT_LOADED_CODES = frozenset({101})
# Not storage failures: milvus-lite's 6 (expression errors), Milvus's 1100 (invalid parameter).
_REQUEST_ERROR_CODES = frozenset({6, 1100})


@dataclass
class FaultLog:
    """The last storage failure seen; /readyz shows it as `last_failure` until a write commits again."""

    failed_at: float = 0.0
    reason: str = ""
    committed_at: float = 0.0

    @property
    def failing(self) -> bool:
        return self.failed_at > self.committed_at


class GuardedClient:
    """A pymilvus MilvusClient whose every method raises StorageUnavailable on a storage failure."""

    def __init__(self, client: Any, uri: str, *, record: StoreRecord | None = None,
                 gate: WriteGate | None = None, store_dir: Path | None = None) -> None:
        self._client = client
        self._uri = uri
        self._record = record
        self._gate = gate
        self._store_dir = store_dir
        self.faults = FaultLog()
        self.committed_rows: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def raw(self) -> Any:
        return self._client

    def batch(self) -> Any:
        """Hold the write gate across several calls (writes and their flush), so that a backup's
        copy and record see all of them or none."""
        return self._gate.writing() if self._gate is not None else _nothing()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def guarded(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, args, kwargs)

        guarded.__name__ = name
        return guarded

    def _call(self, name: str, args: tuple, kwargs: dict) -> Any:
        collection = _collection_of(args, kwargs)
        if name in _WRITES:
            return self._mapped(name, collection, lambda: self._write(name, collection, args, kwargs))
        result = self._mapped(name, collection, lambda: self._invoke(name, collection, args, kwargs))
        return _GuardedIterator(result, self, collection) if name == "query_iterator" else result

    def _mapped(self, name: str, collection: str | None, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except StorageUnavailable as exc:
            self._failed(exc.message)
            raise
        except MilvusException as exc:
            if _is_request_error(exc):
                raise
            raise self._unavailable(name, collection, f"Milvus error {exc.code}: {exc.message}") from exc
        except OSError as exc:
            where = self._store_dir or Path(self._uri)
            raise self._unavailable(name, collection, describe_os_error(exc, where)) from exc
        except Exception as exc:
            if _is_grpc_error(exc):
                raise self._unavailable(name, collection, f"gRPC {type(exc).__name__}: {exc}") from exc
            raise

    def _invoke(self, name: str, collection: str | None, args: tuple, kwargs: dict) -> Any:
        method = getattr(self._client, name)
        try:
            return method(*args, **kwargs)
        except MilvusException as exc:
            if collection is None or name in _NO_RELOAD or not _not_loaded(exc):
                raise
            log.warning("collection %s was released (storage restarted?); loading it again", collection)
            self._client.load_collection(collection)
            return method(*args, **kwargs)

    def _write(self, name: str, collection: str | None, args: tuple, kwargs: dict) -> Any:
        gate = self._gate.writing() if self._gate is not None else _nothing()
        with gate:
            if name == "delete" and collection is not None and self._record is not None:
                self._record.deleting(collection)
            result = self._invoke(name, collection, args, kwargs)
            if collection is not None and name in ("flush", "create_collection"):
                self._committed(collection)
            elif collection is not None and name == "drop_collection" and self._record is not None:
                self._record.forget(collection)
        return result

    def _committed(self, collection: str) -> None:
        rows = self._count(collection)
        with self._lock:
            self.committed_rows[collection] = rows
            self.faults.committed_at = time.monotonic()
        if self._record is not None:
            try:
                files = file_hashes(self._store_dir / "collections" / collection, self._record.files(collection)) \
                    if self._store_dir is not None else {}
                self._record.committed(collection, rows, files)
            except OSError as exc:
                # The data is committed; a record that lags one write is accepted at start-up.
                raise StorageUnavailable(
                    f"the write to {collection} is committed, but the gateway's record could not be updated: "
                    f"{describe_os_error(exc, self._record.path)}; {RETRY_HINT}") from exc

    def count_rows(self, collection: str) -> int:
        """Every row of a physical collection (loading it if released); for the record and `verify`."""
        def count() -> int:
            if not is_loaded(self._client, collection):
                self._client.load_collection(collection)  # at start-up every collection is released
            return self._count(collection)

        return self._mapped("count", collection, count)

    def write_problem(self) -> str | None:
        """Why the store cannot take a write right now (milvus-lite only: its directory is probed)."""
        return write_problem(self._store_dir) if self._store_dir is not None else None

    def recorded_collections(self) -> set[str]:
        return set(self._record.snapshot().collections) if self._record is not None else set()

    def reload(self, *collections: str) -> None:
        for name in collections:
            self._mapped("load_collection", name, lambda name=name: self._client.load_collection(name))

    @property
    def record(self) -> StoreRecord:
        if self._record is None:
            raise StorageUnavailable(f"{self._uri} is a Milvus server: the gateway keeps no record for it")
        return self._record

    def _count(self, collection: str) -> int:
        # Strong: a Milvus server's default (bounded staleness) could miss the write just flushed.
        rows = self._invoke("query", collection, (collection,),
                            {"filter": "", "output_fields": ["count(*)"], "consistency_level": "Strong"})
        return int(rows[0]["count(*)"]) if rows else 0

    def _unavailable(self, name: str, collection: str | None, reason: str) -> StorageUnavailable:
        where = f" on {collection}" if collection else ""
        message = f"storage failed during {name}{where} at {self._uri}: {reason}; {RETRY_HINT}"
        self._failed(reason)
        return StorageUnavailable(message)

    def _failed(self, reason: str) -> None:
        with self._lock:
            self.faults.failed_at = time.monotonic()
            self.faults.reason = reason


class _GuardedIterator:
    """pymilvus's query iterator calls Milvus on every `next()`: those calls need the guard too."""

    def __init__(self, iterator: Any, guard: GuardedClient, collection: str | None) -> None:
        self._iterator = iterator
        self._guard = guard
        self._collection = collection

    def next(self) -> Any:
        return self._guard._mapped("query_iterator.next", self._collection, self._iterator.next)

    def close(self) -> None:
        self._guard._mapped("query_iterator.close", self._collection, self._iterator.close)


def _collection_of(args: tuple, kwargs: dict) -> str | None:
    value = kwargs.get("collection_name", args[0] if args else None)
    return value if isinstance(value, str) else None


def _is_request_error(exc: MilvusException) -> bool:
    """A malformed request (expression, parameter, type) is a bug above storage, not a storage failure."""
    return isinstance(exc, (ParamError, DataTypeNotMatchException)) or exc.code in _REQUEST_ERROR_CODES


def _not_loaded(exc: MilvusException) -> bool:
    message = str(exc.message).lower()
    return exc.code in _NOT_LOADED_CODES or "not loaded" in message or "released" in message


def _is_grpc_error(exc: Exception) -> bool:
    try:
        import grpc
    except ImportError:  # pragma: no cover - pymilvus depends on grpcio
        return False
    return isinstance(exc, grpc.RpcError)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def is_loaded(client: Any, collection: str) -> bool:
    """Whether a collection is loaded (pymilvus answers LoadState.Loaded, NotLoad or Loading)."""
    state = str(client.get_load_state(collection).get("state"))
    return state.endswith("Loaded") and "Not" not in state
