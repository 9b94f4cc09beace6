"""`gateway serve` runs milvus-lite's own gRPC server as a supervised child; other processes find it.

An embedded milvus-lite store belongs to the one process that holds its directory's LOCK, so
`gateway ingest` next to `gateway serve` could not open it, and uvicorn workers could not share
it. `gateway serve` on a local path therefore starts the same engine as a child process that
serves the same directory over gRPC on loopback (milvus-lite's data dir *is* the `x.db`
directory the embedded mode uses, so an existing store needs no migration), and writes where it
listens to `x.server.json` beside the store. Every process that opens the path (serve's workers,
`gateway ingest | search | eval | verify | compact`) reads that file first: while the server is
alive it connects by URI through the same `MilvusStore` code path, otherwise it opens the file
embedded as before.

The port is loopback, but any local user can reach it, and milvus-lite checks no credentials: the
child therefore refuses every call that does not carry the secret the supervisor made for it (a
gRPC interceptor, `_RequireToken`), and the secret travels only in `x.server.json`, which is
created 0600, and on the child's stdin. A user who cannot read that file cannot list, read, write
or drop anything through the port.

Before every start of the child, the first and every restart, the supervisor runs the same
checks `gateway serve` runs before opening a store (gateway/storage/integrity.py): milvus-lite
deletes data files when it opens a directory whose manifest is damaged, so a child that crashed
next to a damaged manifest is not started again. The location file then says why (`refused`),
every process's /readyz reports it, and no write can reach (and rewrite the record of) an
emptied store. The checks run again every few seconds; once the store is restored the child starts.

The supervisor restarts a child that dies, on the same port with the same secret, so clients'
connections recover by themselves. The child runs in its own session (a terminal's Ctrl-C
reaches only the gateway, which then stops the child after draining requests) and exits by
itself when its parent is gone, so a killed serve never leaves the LOCK held. A location file
whose processes are gone is ignored. Where the kernel shares the CPU between sessions first
(autogroup), its own session also keeps the gateway's request threads from crowding out the
server they all wait on; in the gateway's session it gained under some loads and lost under others
(docs/benchmarks.md, "Against the necessary work").

One `gateway serve` supervises (it holds `x.supervisor.lock`). A second one on the same store
(a rolling restart: start the new one, then stop the old one) attaches to the running child and
waits for that lock with a child of its own already launched and imported, but not yet opened; when
the first one stops, it takes the lock, waits for the old child to free the store, runs the
checks and starts its child on the same port with the same secret, so its own connections carry
on without reconnecting.
"""

from __future__ import annotations

import base64
import fcntl
import hmac
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gateway.children import environment, python_module
from gateway.errors import StorageUnavailable, StoreRefused
from gateway.storage.integrity import check_files, lock_holder, process_started_at, record_hint, refusal
from gateway.storage.record import RecordError, StorePaths, read_record, write_atomically

log = logging.getLogger(__name__)

# A child that dies this soon after starting is failing to start (LOCK held, port taken, damage):
# wait longer before the next attempt, so a persistent fault does not spin.
_QUICK_DEATH_S = 5.0
_RESTART_DELAYS_S = (0.2, 1.0, 2.0, 5.0)
_START_TIMEOUT_S = 60.0
# How often a supervisor that refused to start a damaged store looks again, and how often a
# standby serve asks for the supervisor lock (the gap of a rolling restart grows by up to this).
_RECHECK_S = 5.0
_STANDBY_POLL_S = 0.05
# The old child drains its calls for up to 5 s (grace) before it frees the store's LOCK.
_HANDOVER_TIMEOUT_S = 30.0
_LOADED_LINE = "gateway-milvus-lite loaded"
_READY_LINE = "gateway-milvus-lite listening on port "
_BIND_FAILED = "cannot bind "


@dataclass(frozen=True, slots=True)
class ServerLocation:
    """What `x.server.json` says: the URI, the child serving it, the gateway supervising it, and
    the secret every call must carry; `refused` says why the supervisor does not run the child."""

    uri: str
    pid: int
    supervisor_pid: int
    store: str
    started_at: float
    token: str = field(default="", repr=False)
    refused: str = ""

    @property
    def port(self) -> int:
        return int(self.uri.rsplit(":", 1)[1])


def read_location(paths: StorePaths) -> ServerLocation | None:
    try:
        payload = json.loads(paths.server.read_text(encoding="utf-8"))
        return ServerLocation(uri=str(payload["uri"]), pid=int(payload["pid"]),
                              supervisor_pid=int(payload["supervisor_pid"]), store=str(payload["store"]),
                              started_at=float(payload["started_at"]), token=str(payload.get("token", "")),
                              refused=str(payload.get("refused", "")))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def live_server(paths: StorePaths) -> ServerLocation | None:
    """The server `gateway serve` runs for this store, or None when there is none (or the file is stale).

    Live means: the supervising gateway is alive (then the URI is right even while the child is
    being restarted; calls wait or fail with a retry hint until it is back), or the child itself is
    alive and accepts connections. A file left by a killed serve names dead processes and is ignored.
    """
    location = read_location(paths)
    if location is None or location.store != str(paths.store):
        return None
    if _is_ours(location.supervisor_pid, "gateway", location.started_at) and location.supervisor_pid != os.getpid():
        return location
    if _is_ours(location.pid, __name__, location.started_at) and _accepts(location.port):
        return location
    return None


def authorization(token: str) -> str:
    """The `authorization` metadata value pymilvus sends for `token=` (base64 of the token)."""
    return base64.b64encode(token.encode("utf-8")).decode("ascii")


class SupervisedServer:
    """Starts milvus-lite's server for one store as a child process and keeps it running.

    `start()` returns once it accepts connections and the location file is written, or, when
    another `gateway serve` already supervises the store, at once with that one's location (this
    one then takes over when the other stops). `stop()` shuts the child down cleanly (SIGINT:
    milvus-lite closes its engine on it) and removes the file.
    """

    def __init__(self, paths: StorePaths, *, host: str = "127.0.0.1", accept_empty: bool = False) -> None:
        self.paths = paths
        self.host = host
        self.restarts = 0
        # Why the child is not running (the pre-open checks found damage); empty while it runs.
        self.refused = ""
        # Set once this process holds the supervisor lock (at start, or on taking over).
        self.supervising = threading.Event()
        self._accept_empty = accept_empty
        self._port = 0
        self._token = secrets.token_urlsafe(32)
        self._process: subprocess.Popen[str] | None = None
        self._warm: subprocess.Popen[str] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._thread: threading.Thread | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def token(self) -> str:
        """The secret every call to the child must carry (a client's `token=`)."""
        return self._token

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> ServerLocation:
        self.paths.store.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.paths.supervisor_lock, os.O_CREAT | os.O_RDWR, 0o600)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            if self._take_lock():
                reason = self._refusal("Nothing was changed on disk. ", accept_empty=self._accept_empty)
                if reason is not None:
                    self._release_lock()
                    raise StoreRefused(reason)
                try:
                    self._open(self._launch())
                except BaseException:
                    self._release_lock()
                    raise
                self._thread = threading.Thread(target=self._watch, name="milvus-lite-supervisor", daemon=True)
                self._thread.start()
                return self._location()
            running = live_server(self.paths)
            if running is not None and running.token:
                self._port, self._token = running.port, running.token
                self._thread = threading.Thread(target=self._standby, name="milvus-lite-standby", daemon=True)
                self._thread.start()
                log.info("another gateway serve (pid %d) supervises the milvus-lite server for %s; this one "
                         "takes over when it stops", running.supervisor_pid, self.paths.store)
                return running
            if time.monotonic() > deadline:
                raise StorageUnavailable(f"another process holds {str(self.paths.supervisor_lock)!r} but no "
                                         f"milvus-lite server for {str(self.paths.store)!r} came up in "
                                         f"{_START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stopping.set()
        with self._lock:
            process, warm = self._process, self._warm
        if warm is not None and warm.poll() is None:
            warm.kill()
            warm.wait()
        if process is not None and process.poll() is None and self.supervising.is_set():
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        location = read_location(self.paths)
        if location is not None and location.supervisor_pid == os.getpid():
            self.paths.server.unlink(missing_ok=True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        # Last: a standby serve takes over once the lock is free, and the store is free by now.
        self._release_lock()

    def __enter__(self) -> SupervisedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the supervisor lock ----------------------------------------------------------------

    def _take_lock(self) -> bool:
        assert self._lock_fd is not None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.supervising.set()
        return True

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the file releases its flock
            self._lock_fd = None
        self.supervising.clear()

    # -- starting the child -----------------------------------------------------------------

    def _refusal(self, note: str, *, accept_empty: bool = False) -> str | None:
        """Why the pre-open checks refuse the store (the same sentence `gateway serve` would say at
        start-up), or None: the child is started only then."""
        try:
            record = read_record(self.paths.record)
        except RecordError as exc:
            return f"{exc.message}; {record_hint(self.paths)}"
        problems = check_files(self.paths, record, accept_empty=accept_empty)
        return refusal(self.paths, problems, note) if problems else None

    def _launch(self) -> subprocess.Popen[str]:
        """A child that has imported milvus-lite and waits on its stdin for the port and secret."""
        command = python_module(__name__, "--data-dir", str(self.paths.store), "--host", self.host,
                                "--parent", str(os.getpid()))
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True, env={**environment(), "PYTHONUNBUFFERED": "1"})
        self._expect(process, _LOADED_LINE)
        return process

    def _open(self, process: subprocess.Popen[str]) -> None:
        """Tell a launched child to open the store and listen; it is the running child once it does."""
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps({"port": self._port, "token": self._token}) + "\n")
            process.stdin.close()
        except OSError:
            pass  # it died: _expect reports its output
        line = self._expect(process, _READY_LINE)
        # Keep draining its output, or a chatty child would block on a full pipe.
        threading.Thread(target=_drain, args=(process,), daemon=True).start()
        with self._lock:
            self._process = process
            if process is self._warm:
                self._warm = None
            self._port = int(line[len(_READY_LINE):].strip())
            self.refused = ""
        self._write_location()
        log.info("milvus-lite server for %s listening at %s (pid %d)", self.paths.store, self.uri, process.pid)

    def _expect(self, process: subprocess.Popen[str], prefix: str) -> str:
        output: list[str] = []
        deadline = time.monotonic() + _START_TIMEOUT_S
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output.append(line.rstrip())
            if line.startswith(prefix):
                return line
        if process.poll() is None:
            process.kill()
        process.wait()
        if any(line.startswith(_BIND_FAILED) for line in output) and self._port:
            self._port = 0  # the port went to someone else: the next attempt takes a new one
        tail = "; ".join(output[-5:]) or "no output"
        raise StorageUnavailable(f"milvus-lite server for {str(self.paths.store)!r} did not start "
                                 f"(exit code {process.returncode}): {tail}")

    def _location(self, refused: str = "") -> ServerLocation:
        return ServerLocation(uri=self.uri, pid=self.pid or 0, supervisor_pid=os.getpid(),
                              store=str(self.paths.store), started_at=time.time(), token=self._token,
                              refused=refused)

    def _write_location(self, refused: str = "") -> None:
        payload = json.dumps(asdict(self._location(refused)), indent=1).encode("utf-8")
        write_atomically(self.paths.server, payload, mode=0o600)

    def _bring_up(self, launched: subprocess.Popen[str] | None = None) -> bool:
        """Start the child once the pre-open checks pass; False when stopped first."""
        delay = 0.0
        while not self._stopping.wait(delay):
            reason = self._refusal("The supervisor did not start milvus-lite, which would have deleted data files. ")
            if reason is not None:
                if reason != self.refused:
                    log.error("%s", reason)
                    self.refused = reason
                    self._write_location(refused=reason)
                delay = _RECHECK_S
                continue
            try:
                self._open(launched if launched is not None and launched.poll() is None else self._launch())
                return True
            except (StorageUnavailable, OSError) as exc:
                log.error("starting milvus-lite failed: %s", exc)
                delay = _RESTART_DELAYS_S[-1]
            finally:
                launched = None
        return False

    def _watch(self) -> None:
        attempt = 0
        while not self._stopping.is_set():
            with self._lock:
                process = self._process
            assert process is not None
            started = time.monotonic()
            code = process.wait()
            if self._stopping.is_set():
                return
            attempt = attempt + 1 if time.monotonic() - started < _QUICK_DEATH_S else 0
            delay = _RESTART_DELAYS_S[min(attempt, len(_RESTART_DELAYS_S) - 1)]
            log.error("milvus-lite server (pid %d) exited with code %s; restarting it in %.1f s on %s",
                      process.pid, code, delay, self.uri)
            if self._stopping.wait(delay) or not self._bring_up():
                return
            self.restarts += 1

    def _standby(self) -> None:
        """Wait for the supervising serve to stop, then take over with a child launched in advance."""
        warm: subprocess.Popen[str] | None = None
        while not self._stopping.is_set():
            if warm is None or warm.poll() is not None:
                try:
                    warm = self._launch()
                except StorageUnavailable as exc:
                    log.error("launching a standby milvus-lite server failed: %s", exc)
                    warm = None
                with self._lock:
                    self._warm = warm
            if self._take_lock():
                break
            self._stopping.wait(_STANDBY_POLL_S)
        if self._stopping.is_set():
            if warm is not None and warm.poll() is None:  # stop() may have looked before it was there
                warm.kill()
                warm.wait()
            return
        log.warning("the gateway serve supervising %s is gone; this one (pid %d) takes over", self.paths.store,
                    os.getpid())
        deadline = time.monotonic() + _HANDOVER_TIMEOUT_S
        while lock_holder(self.paths.store) is not None and time.monotonic() < deadline:
            if self._stopping.wait(0.02):
                return
        if self._bring_up(warm):
            self._watch()


def _drain(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        log.debug("milvus-lite: %s", line.rstrip())


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        return True
    except OSError:
        return False


# Slack for comparing a process's start time with the location file's: /proc gives whole-second boot times.
_START_SLACK_S = 1.0


def _is_ours(pid: int, marker: str, written_at: float) -> bool:
    """Alive, and (where /proc exists) running a command that names `marker` and started before the
    location file was written at `written_at`: a reused pid is not ours, even when its command line
    happens to name the gateway (`tini -- gateway serve` as pid 1 after a container restart)."""
    if pid <= 0:
        return False
    started = process_started_at(pid)
    if started is not None and started > written_at + _START_SLACK_S:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():
        return True
    try:
        return marker in cmdline.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return False


# -- the child ----------------------------------------------------------------------------

# milvus-lite's own server allows 256 MiB messages, as a Milvus standalone does.
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_GRPC_WORKERS = 10


def _require_token(token: str) -> Any:
    """A gRPC server interceptor that refuses, UNAUTHENTICATED, every call without `token`."""
    import grpc

    expected = authorization(token).encode("ascii")

    def deny(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED,
                      "this milvus-lite server belongs to a gateway serve: calls need its secret")

    class RequireToken(grpc.ServerInterceptor):
        def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
            for key, value in details.invocation_metadata or ():
                sent = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
                if key == "authorization" and hmac.compare_digest(sent, expected):
                    return continuation(details)
            handler = continuation(details)
            if handler is None:
                return None
            if handler.request_streaming and handler.response_streaming:
                return grpc.stream_stream_rpc_method_handler(deny)
            if handler.request_streaming:
                return grpc.stream_unary_rpc_method_handler(deny)
            if handler.response_streaming:
                return grpc.unary_stream_rpc_method_handler(deny)
            return grpc.unary_unary_rpc_method_handler(deny)

    return RequireToken()


def _grpc_server(db: Any, token: str) -> Any:
    """milvus-lite's gRPC server over `db`, as milvus-lite builds it, plus the secret check."""
    from concurrent import futures

    import grpc
    from milvus_lite.adapter.grpc.servicer import MilvusServicer
    from pymilvus.grpc_gen import milvus_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=_GRPC_WORKERS), interceptors=[_require_token(token)],
                         options=[("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                                  ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES)])
    milvus_pb2_grpc.add_MilvusServiceServicer_to_server(MilvusServicer(db), server)
    return server


_embedded_lock = threading.Lock()
_embedded_tokens: dict[str, str] = {}


def embedded_secret(store: Path) -> str:
    """Open `store` in this process, behind milvus-lite's server with a secret; returns the secret.

    pymilvus opens a `.db` path by starting milvus-lite's gRPC server in this process on a random
    loopback port, which any local user could call while the process runs. This starts that server
    itself, with the secret check, and registers it where pymilvus looks
    (milvus_lite.server_manager, keyed by the absolute path), so `MilvusClient(uri=path,
    token=secret)` connects to it and `release_server(path)` closes it, as before.
    """
    from milvus_lite.db import MilvusLite
    from milvus_lite.server_manager import server_manager_instance as manager

    key = os.path.abspath(str(store))
    with _embedded_lock:
        with manager._lock:
            running = key in manager._servers
        token = _embedded_tokens.get(key)
        if running and token is not None:
            return token
        if running:
            # Started by pymilvus itself (a path passed to MilvusClient directly): it has no secret.
            return ""
        token = secrets.token_urlsafe(32)
        db = MilvusLite(key)
        try:
            server = _grpc_server(db, token)
            port = server.add_insecure_port("127.0.0.1:0")
            server.start()
        except BaseException:
            db.close()
            raise
        with manager._lock:
            manager._servers[key] = (server, db, port)
        _embedded_tokens[key] = token
        return token


def _serve_child(data_dir: str, host: str, parent: int) -> int:
    """Import, wait for the port and secret on stdin, then serve `data_dir` until SIGINT/SIGTERM
    or until the parent gateway is gone."""
    import grpc  # noqa: F401  (imported before the ready line: the takeover gap should not pay for it)
    from milvus_lite.adapter.grpc.servicer import MilvusServicer  # noqa: F401
    from milvus_lite.db import MilvusLite

    from gateway.storage import bulk

    bulk.patch_engine()  # the engine's flush, brute-force search, BM25 index and row validity, as embedded (storage/bulk.py)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(_LOADED_LINE, flush=True)
    line = sys.stdin.readline()
    if not line:
        return 0  # the supervisor stopped (or never took over) before this child was needed
    orders = json.loads(line)
    db = MilvusLite(data_dir)
    server = _grpc_server(db, orders["token"])
    try:
        bound = server.add_insecure_port(f"{host}:{int(orders['port'])}")
    except RuntimeError:
        bound = 0
    if not bound:
        db.close()
        print(f"{_BIND_FAILED}{host}:{orders['port']}", flush=True)
        return 1
    server.start()
    print(f"{_READY_LINE}{bound}", flush=True)
    try:
        # A parent killed with SIGKILL cannot stop us: notice it (we get re-parented) and exit,
        # so the store's LOCK is free for the next `gateway serve`.
        while not stop.wait(0.2):
            if os.getppid() != parent:
                break
    finally:
        server.stop(grace=5).wait(6)
        db.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gateway.storage.server")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--parent", type=int, default=0)
    args = parser.parse_args(argv)
    logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
    return _serve_child(args.data_dir, args.host, args.parent or os.getppid())


if __name__ == "__main__":
    raise SystemExit(main())
