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

The supervisor restarts a child that dies, on the same port, so clients' connections recover by
themselves; calls in between fail as STORAGE_UNAVAILABLE with a retry hint (guard.py). The child
runs in its own session (a terminal's Ctrl-C reaches only the gateway, which then stops the
child after draining requests) and exits by itself when its parent is gone, so a killed serve
never leaves the LOCK held. A location file whose processes are gone is ignored.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gateway.errors import StorageUnavailable
from gateway.storage.integrity import process_started_at
from gateway.storage.record import StorePaths, write_atomically

log = logging.getLogger(__name__)

# A child that dies this soon after starting is failing to start (LOCK held, port taken, damage):
# wait longer before the next attempt, so a persistent fault does not spin.
_QUICK_DEATH_S = 5.0
_RESTART_DELAYS_S = (0.2, 1.0, 2.0, 5.0)
_START_TIMEOUT_S = 60.0
_READY_LINE = "gateway-milvus-lite listening on port "


@dataclass(frozen=True, slots=True)
class ServerLocation:
    """What `x.server.json` says: the URI, the child serving it, and the gateway supervising it."""

    uri: str
    pid: int
    supervisor_pid: int
    store: str
    started_at: float

    @property
    def port(self) -> int:
        return int(self.uri.rsplit(":", 1)[1])


def read_location(paths: StorePaths) -> ServerLocation | None:
    try:
        payload = json.loads(paths.server.read_text(encoding="utf-8"))
        return ServerLocation(uri=str(payload["uri"]), pid=int(payload["pid"]),
                              supervisor_pid=int(payload["supervisor_pid"]), store=str(payload["store"]),
                              started_at=float(payload["started_at"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def live_server(paths: StorePaths) -> ServerLocation | None:
    """The server `gateway serve` runs for this store, or None when there is none (or the file is stale).

    Live means: the supervising gateway is alive (then the URI is right even while the child is
    being restarted; calls fail with a retry hint until it is back), or the child itself is alive
    and accepts connections. A file left by a killed serve names dead processes and is ignored.
    """
    location = read_location(paths)
    if location is None or location.store != str(paths.store):
        return None
    if _is_ours(location.supervisor_pid, "gateway", location.started_at) and location.supervisor_pid != os.getpid():
        return location
    if _is_ours(location.pid, __name__, location.started_at) and _accepts(location.port):
        return location
    return None


class SupervisedServer:
    """Starts milvus-lite's server for one store as a child process and keeps it running.

    `start()` returns once it accepts connections and the location file is written; `stop()`
    shuts it down cleanly (SIGINT: milvus-lite closes its engine on it) and removes the file.
    """

    def __init__(self, paths: StorePaths, *, host: str = "127.0.0.1") -> None:
        self.paths = paths
        self.host = host
        self.restarts = 0
        self._port = 0
        self._process: subprocess.Popen[str] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._monitor: threading.Thread | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> ServerLocation:
        self.paths.store.parent.mkdir(parents=True, exist_ok=True)
        self._spawn()
        self._monitor = threading.Thread(target=self._watch, name="milvus-lite-supervisor", daemon=True)
        self._monitor.start()
        return self._location()

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stopping.set()
        with self._lock:
            process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        location = read_location(self.paths)
        if location is not None and location.supervisor_pid == os.getpid():
            self.paths.server.unlink(missing_ok=True)
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=5)

    def __enter__(self) -> SupervisedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self) -> None:
        command = [sys.executable, "-m", __name__, "--data-dir", str(self.paths.store), "--host", self.host,
                   "--port", str(self._port), "--parent", str(os.getpid())]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        output: list[str] = []
        deadline = time.monotonic() + _START_TIMEOUT_S
        port = 0
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output.append(line.rstrip())
            if line.startswith(_READY_LINE):
                port = int(line[len(_READY_LINE):].strip())
                break
        if not port:
            if process.poll() is None:
                process.kill()
            process.wait()
            tail = "; ".join(output[-5:]) or "no output"
            raise StorageUnavailable(f"milvus-lite server for {str(self.paths.store)!r} did not start "
                                     f"(exit code {process.returncode}): {tail}")
        # Keep draining its output, or a chatty child would block on a full pipe.
        threading.Thread(target=_drain, args=(process,), daemon=True).start()
        with self._lock:
            self._process = process
            self._port = port
        write_atomically(self.paths.server, json.dumps(asdict(self._location()), indent=1).encode("utf-8"))
        log.info("milvus-lite server for %s listening at %s (pid %d)", self.paths.store, self.uri, process.pid)

    def _location(self) -> ServerLocation:
        assert self._process is not None
        return ServerLocation(uri=self.uri, pid=self._process.pid, supervisor_pid=os.getpid(),
                              store=str(self.paths.store), started_at=time.time())

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
            while not self._stopping.wait(delay):
                try:
                    self._spawn()
                    self.restarts += 1
                    break
                except (StorageUnavailable, OSError) as exc:
                    log.error("restarting milvus-lite failed: %s", exc)
                    delay = _RESTART_DELAYS_S[-1]


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


def _serve_child(data_dir: str, host: str, port: int, parent: int) -> int:
    """Serve `data_dir` until SIGINT/SIGTERM or until the parent gateway is gone."""
    from milvus_lite.adapter.grpc.server import start_server_in_thread

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server, db, bound = start_server_in_thread(data_dir=data_dir, host=host, port=port)
    if not bound:
        db.close()
        print(f"cannot bind {host}:{port}", flush=True)
        return 1
    print(f"{_READY_LINE}{bound}", flush=True)
    try:
        # A parent killed with SIGKILL cannot stop us: notice it (we get re-parented) and exit,
        # so the store's LOCK is free for the next `gateway serve`.
        while not stop.wait(1.0):
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
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--parent", type=int, default=0)
    args = parser.parse_args(argv)
    logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
    return _serve_child(args.data_dir, args.host, args.port, args.parent or os.getppid())


if __name__ == "__main__":
    raise SystemExit(main())
