"""The store's client: a Milvus server at a URI, or milvus-lite embedded at a path (or served
for it by `gateway serve`), guarded and with its open failures diagnosed."""

from __future__ import annotations

import logging

from pymilvus import MilvusClient, MilvusException

from gateway.errors import StorageUnavailable
from gateway.storage.guard import RETRY_HINT, GuardedClient
from gateway.storage.integrity import open_refusal
from gateway.storage.milvus.client import StoreClient
from gateway.storage.record import StorePaths, StoreRecord, WriteGate
from gateway.storage.server import embedded_secret

log = logging.getLogger(__name__)
_REMOTE_SCHEMES = ("http://", "https://", "tcp://", "grpc://", "unix:")


def is_embedded(uri: str) -> bool:
    """A path (not a URI) means milvus-lite, embedded in this process."""
    return not uri.startswith(_REMOTE_SCHEMES)


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


def connect(uri: str, token: str | None) -> GuardedClient:
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
        client = StoreClient(uri=uri, token=secret, grpc_options=_CHANNEL)
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

    def connect(where: ServerLocation) -> StoreClient:
        try:
            # Dedicated: pymilvus otherwise shares one channel per address between clients, and
            # closing a hung one (GuardedClient does) would close it for all of them.
            return StoreClient(uri=where.uri, token=where.token, grpc_options=_CHANNEL, dedicated=True,
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
