"""One place where every Milvus failure becomes StorageUnavailable, and released collections come back.

`GuardedClient` wraps the pymilvus client that `MilvusStore` uses, so no storage call can leak a
MilvusException, a gRPC error or an OSError (full disk, read-only or vanished directory) to a
client as INTERNAL. A collection found released or unloaded (a Milvus or milvus-lite server
restarted) is loaded again and the call retried once, so the first search after storage comes
back succeeds without a gateway restart. Writes pass the backup's write gate and, once a
flush commits them, update the gateway's record of row counts.

On the milvus-lite server that `gateway serve` supervises, each call first asks the store's
health (storage/health.py): it waits while the server restarts, and fails at once while it hangs
or is refused. A call that finds the server gone waits for it and runs again (all but `insert`,
`create_collection` and `drop_collection`, which are not safe to repeat), on a fresh connection.

Client-facing messages never name the store's address or directory: they go to every caller of
the API. The log gets the full reason.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymilvus import MilvusException
from pymilvus.exceptions import DataTypeNotMatchException, ParamError

from gateway.errors import StorageUnavailable
from gateway.storage.health import Health, HealthReport, StoreHealth
from gateway.storage.integrity import file_hashes, os_error_reason, write_problem
from gateway.storage.record import StoreRecord, WriteGate
from gateway.storage.server import ServerLocation

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
# Run again after the server came back only if a second run cannot do harm: an insert would
# duplicate rows, a create or drop that did happen would now fail.
_NOT_REPEATED = frozenset({"insert", "create_collection", "drop_collection"})
# An address in a gRPC or pymilvus message: ipv4:127.0.0.1:19530, [::1]:19530, host:port, unix:/path.
_ADDRESS = re.compile(r"(?:ipv[46]:)?(?:\[[0-9a-fA-F:]+\]|\d{1,3}(?:\.\d{1,3}){3}|localhost)(?::\d+)?|unix:\S+")


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
                 gate: WriteGate | None = None, store_dir: Path | None = None,
                 health: StoreHealth | None = None,
                 connect: Callable[[ServerLocation], Any] | None = None) -> None:
        self._client: Any | None = client
        self._kind = type(client)
        self._uri = uri
        self._record = record
        self._gate = gate
        self._store_dir = store_dir
        self._health = health
        self._connect = connect
        self.faults = FaultLog()
        self.committed_rows: dict[str, int] = {}
        self._lock = threading.Lock()
        self._connecting = threading.Lock()
        if health is not None:
            health.on_change(self._health_changed)

    @property
    def raw(self) -> Any:
        return self._current()

    @property
    def store_dir(self) -> Path | None:
        """The milvus-lite directory (embedded or served); None for a Milvus server."""
        return self._store_dir

    @property
    def health(self) -> HealthReport | None:
        return self._health.report if self._health is not None else None

    def close(self) -> None:
        if self._health is not None:
            self._health.close()
        client = self._client
        if client is not None:
            self._mapped("close", None, client.close)

    def batch(self) -> Any:
        """Hold the write gate across several calls (writes and their flush), so that a backup's
        copy and record see all of them or none."""
        return self._gate.writing() if self._gate is not None else _nothing()

    def __getattr__(self, name: str) -> Any:
        # Resolved on the class: asking the hung server for a connection just to name a method would hang.
        attr = getattr(self._kind, name, None)
        if attr is None:
            attr = getattr(self._current(), name)
        if not callable(attr):
            return attr

        def guarded(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, args, kwargs)

        guarded.__name__ = name
        return guarded

    def _call(self, name: str, args: tuple, kwargs: dict) -> Any:
        collection = _collection_of(args, kwargs)
        if name in _WRITES:
            return self._mapped(name, collection, lambda: self._admitted(
                name, lambda: self._write(name, collection, args, kwargs)))
        result = self._mapped(name, collection, lambda: self._admitted(
            name, lambda: self._invoke(name, collection, args, kwargs)))
        return _GuardedIterator(result, self, collection) if name == "query_iterator" else result

    def _admitted(self, name: str, call: Callable[[], Any]) -> Any:
        """`call` once the server is known to answer; again after it came back, when safe to repeat."""
        if self._health is None:
            return call()
        until = time.monotonic() + self._health.wait_s
        while True:
            self._health.admit(until)
            try:
                return call()
            except Exception as exc:
                report = self._health.report
                if report.state in (Health.HUNG, Health.REFUSED):
                    # Cancelled (its channel closed) because the server hangs: say that, not "channel closed".
                    raise StorageUnavailable(report.client_message()) from exc
                if not _connection_lost(exc):
                    raise
                self._health.lost(_scrubbed(str(exc)))
                if name in _NOT_REPEATED or time.monotonic() >= until:
                    raise
                log.info("storage went away during %s; running it again once it is back", name)

    def _current(self) -> Any:
        """The client to call: a new connection after the server came back, moved or hung."""
        client = self._client
        if client is not None:
            return client
        assert self._connect is not None and self._health is not None
        with self._connecting:
            if self._client is None:
                self._client = self._connect(self._health.report.location)
            return self._client

    def _health_changed(self, before: HealthReport, after: HealthReport) -> None:
        if self._connect is None:
            return
        moved = (before.location.uri, before.location.token) != (after.location.uri, after.location.token)
        if after.state is Health.HUNG or moved:
            # Closing the channel cancels the calls waiting on a hung server: they fail now, rather
            # than hold their worker threads until it wakes up.
            client, self._client = self._client, None
            if client is not None:
                client.close()
        elif after.state is Health.UP and before.state is not Health.UP:
            # gRPC backs off reconnecting for up to a second after a refused connection: a fresh
            # channel answers at once. Calls still on the old one finish there.
            self._client = None

    def unavailable(self) -> str | None:
        """Why the store cannot be called at all right now (hung, restarting, refused), or None."""
        report = self.health
        return report.reason if report is not None and report.state is not Health.UP else None

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
            raise self._unavailable(name, collection, f"the store's directory {os_error_reason(exc)}") from exc
        except Exception as exc:
            if _is_grpc_error(exc):
                raise self._unavailable(name, collection, f"gRPC {type(exc).__name__}: {exc}") from exc
            raise

    def _invoke(self, name: str, collection: str | None, args: tuple, kwargs: dict) -> Any:
        client = self._current()
        method = getattr(client, name)
        try:
            return method(*args, **kwargs)
        except MilvusException as exc:
            if collection is None or name in _NO_RELOAD or not _not_loaded(exc):
                raise
            log.warning("collection %s was released (storage restarted?); loading it again", collection)
            client.load_collection(collection)
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
                log.error("the gateway's record %s could not be updated: %s", self._record.path, exc)
                raise StorageUnavailable(
                    f"the write to {collection} is committed, but the gateway's record could not be updated: "
                    f"its file {os_error_reason(exc)}; {RETRY_HINT}") from exc

    def count_rows(self, collection: str) -> int:
        """Every row of a physical collection (loading it if released); for the record and `verify`."""
        def count() -> int:
            client = self._current()
            if not is_loaded(client, collection):
                client.load_collection(collection)  # at start-up every collection is released
            return self._count(collection)

        return self._mapped("count", collection, lambda: self._admitted("count", count))

    def write_problem(self) -> str | None:
        """Why the store cannot take a write right now (milvus-lite only: its directory is probed)."""
        return write_problem(self._store_dir) if self._store_dir is not None else None

    def recorded_collections(self) -> set[str]:
        return set(self._record.snapshot().collections) if self._record is not None else set()

    def reload(self, *collections: str) -> None:
        for name in collections:
            self._mapped("load_collection", name, lambda name=name: self._admitted(
                "load_collection", lambda: self._current().load_collection(name)))

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
        log.warning("storage failed during %s%s at %s: %s", name, where, self._uri, reason)
        reason = _scrubbed(reason.replace(self._uri, "the store"))
        self._failed(reason)
        return StorageUnavailable(f"storage failed during {name}{where}: {reason}; {RETRY_HINT}")

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


def _connection_lost(exc: BaseException) -> bool:
    """No server behind the address: gRPC UNAVAILABLE anywhere in the chain, or pymilvus's own
    words for it (its retry decorator re-raises `e from e`, which drops the gRPC cause)."""
    import grpc

    pending, seen = [exc], set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, grpc.RpcError) and callable(getattr(current, "code", None)) \
                and current.code() == grpc.StatusCode.UNAVAILABLE:
            return True
        if isinstance(current, MilvusException) and "Fail connecting to server" in str(current.message):
            return True
        pending.extend((current.__cause__, current.__context__))
    return False


def _scrubbed(text: str) -> str:
    """`text` without addresses: pymilvus and gRPC name host and port in their messages."""
    return _ADDRESS.sub("the store", text)


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
