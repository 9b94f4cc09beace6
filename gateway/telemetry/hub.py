"""One /metrics for `gateway serve --workers N`: the supervising parent holds the server's series.

Each worker process used to keep its own counters, and a scrape landed on one of them: successive
scrapes read 76, 46, 76... and Prometheus saw counter resets. Now a worker holds no series. Every
update (a counter's `inc`, a histogram's `observe`, a gauge's `set`) is one datagram to the parent,
which applies it to the one registry of the whole server (gateway/telemetry/metrics.py, with its
per-tenant series cap); a scrape of any worker asks the parent for its exposition over a stream
socket. Both sockets live in a private directory (mode 0700) that the parent creates at start and
removes on exit (the next start removes one a killed parent left); its path reaches the workers in
GATEWAY_METRICS_HUB.

- Exact: the parent reads every datagram already queued before it renders, so an update a worker
  sent before a scrape started is in that scrape, whichever worker answers it.
- Monotonic: counters and histograms live in the parent, so a worker that dies or is replaced
  takes nothing with it. Gauges (in-flight and queued requests, open streams) are summed over the
  workers that report them; a worker's share is dropped when it dies.
- Counters a worker keeps itself (lifecycle hook deliveries) are sent as totals every
  TOTALS_INTERVAL_S and summed over every worker process that ever reported them.

Not prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR): there, removing a label set
is not supported and every series ever written stays in the workers' files, so the per-tenant
cap (GATEWAY_METRICS_TENANTS) would not hold, and custom collectors (hooks, process usage) do
not work (https://prometheus.github.io/client_python/multiprocess/). Here the cap is one
TenantSeries in the parent, for the whole server. An update costs the worker a `sendto`: 84 µs
per request of five updates, sent and applied, measured in one process on two shared cores.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.processes import ServerProcesses

log = logging.getLogger("gateway")

HUB_ENV = "GATEWAY_METRICS_HUB"
WORKER_ENV = "GATEWAY_WORKER_ID"
_PREFIX = "gateway-metrics-"
_UPDATES = "updates.sock"
_SCRAPES = "scrape.sock"
# How often a worker sends the totals of counters it keeps itself (hook deliveries): their lag on /metrics.
TOTALS_INTERVAL_S = 1.0
# A scrape waits this long for the parent; a parent that slow is stuck or gone.
SCRAPE_TIMEOUT_S = 10.0
_OPS = frozenset({"inc", "observe", "set"})


class MetricsHub:
    """The parent's side: a private socket directory, the server's registry, and a thread serving both."""

    def __init__(self, max_tenants: int) -> None:
        _remove_stale(Path(tempfile.gettempdir()))
        # Mode 0700: this user only. The pid in the name lets the next start remove it if this one is killed.
        self.directory = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
        self.processes = ServerProcesses(supervisor_pid=os.getpid())
        self.metrics = GatewayMetrics(max_tenants, processes=self.processes)
        self._totals = _WorkerTotals()
        self.metrics.registry.register(self._totals)
        # (metric name, label values) -> {worker pid: value}: each worker process's share of a summed gauge.
        self._gauges: dict[tuple[str, tuple[str, ...]], dict[int, float]] = {}
        self._lock = threading.Lock()
        self._updates = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._updates.bind(str(self.directory / _UPDATES))
        self._updates.setblocking(False)
        self._scrapes = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._scrapes.bind(str(self.directory / _SCRAPES))
        self._scrapes.listen(64)
        self._stop_read, self._stop_write = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="gateway-metrics-hub", daemon=True)

    def start(self) -> MetricsHub:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread, close the sockets and remove the directory."""
        if self._thread.is_alive():
            self._stop_write.send(b"x")
            self._thread.join(timeout=5)
        for sock in (self._updates, self._scrapes, self._stop_read, self._stop_write):
            sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def worker_started(self, worker: str, pid: int, *, restart: bool = False) -> None:
        self.processes.started(worker, pid, restart=restart)

    def worker_gone(self, worker: str, pid: int) -> None:
        """The process `pid` of `worker` has exited: not up, and its share of every gauge is dropped."""
        self.processes.gone(worker, pid)
        with self._lock:
            for key, shares in list(self._gauges.items()):
                if shares.pop(pid, None) is not None:
                    self._set_gauge(key, shares)

    def render(self) -> bytes:
        """The exposition, once every update already sent is applied."""
        with self._lock:
            self._drain()
            return self.metrics.render()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._updates, selectors.EVENT_READ, "update")
            selector.register(self._scrapes, selectors.EVENT_READ, "scrape")
            selector.register(self._stop_read, selectors.EVENT_READ, "stop")
            while True:
                for key, _ in selector.select():
                    if key.data == "stop":
                        return
                    if key.data == "update":
                        with self._lock:
                            self._drain()
                    else:
                        self._answer_scrape()

    def _answer_scrape(self) -> None:
        try:
            connection, _ = self._scrapes.accept()
        except OSError:
            return
        with connection:
            try:
                connection.settimeout(SCRAPE_TIMEOUT_S)
                connection.sendall(self.render())
            except OSError as exc:  # the scraping worker gave up or died: its scrape, not the hub, failed
                log.warning("metrics: a worker's scrape was not answered: %s", exc)

    def _drain(self) -> None:
        while True:
            try:
                datagram = self._updates.recv(1 << 20)
            except BlockingIOError:
                return
            try:
                self._apply(json.loads(datagram))
            except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:  # a worker bug: not a reason to stop
                log.error("metrics: an update from a worker was not understood (%s): %.200r", exc, datagram)

    def _apply(self, message: list[Any]) -> None:
        kind = message[0]
        if kind == "up":
            self.processes.serving(str(message[1]), int(message[2]))
        elif kind == "totals":
            self._totals.report(int(message[1]), message[2])
        else:
            pid, name, labels, op, value = int(message[1]), message[2], tuple(message[3]), message[4], message[5]
            if op not in _OPS:
                raise ValueError(f"operation {op!r}; allowed: {', '.join(sorted(_OPS))}")
            metric = self.metrics.named(name)
            if op == "set":
                key = (name, labels)
                shares = self._gauges.setdefault(key, {})
                shares[pid] = float(value)
                self._set_gauge(key, shares)
            else:
                getattr(self.metrics.child(metric, *labels), op)(float(value))

    def _set_gauge(self, key: tuple[str, tuple[str, ...]], shares: dict[int, float]) -> None:
        name, labels = key
        self.metrics.child(self.metrics.named(name), *labels).set(sum(shares.values()))
        if not any(shares.values()):
            del self._gauges[key]  # idle everywhere: nothing to remember (bounded by busy tenants)


def _remove_stale(where: Path) -> None:
    """Directories this user's earlier hubs left when their process was killed (SIGKILL, OOM)."""
    for directory in where.glob(f"{_PREFIX}*-*"):
        try:
            pid = int(directory.name.removeprefix(_PREFIX).split("-", 1)[0])
            if directory.stat().st_uid != os.getuid():
                continue
            os.kill(pid, 0)
        except ValueError:
            continue
        except ProcessLookupError:
            shutil.rmtree(directory, ignore_errors=True)
        except OSError:
            continue  # alive under another user (PermissionError), or gone already


class _WorkerTotals(Collector):
    """Counter families that workers report as totals: the sum over every worker process, dead ones included."""

    def __init__(self) -> None:
        self._by_pid: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    def report(self, pid: int, families: list[Any]) -> None:
        with self._lock:
            self._by_pid[pid] = families

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self._lock:
            reports = list(self._by_pid.values())
        helps: dict[str, str] = {}
        sums: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for families in reports:
            for name, help_text, samples in families:
                helps[name] = help_text
                family = sums.setdefault(name, {})
                for labels, value in samples:
                    key = tuple(sorted(labels.items()))
                    family[key] = family.get(key, 0.0) + value
        for name in sorted(sums):
            samples = sums[name]
            labelnames = [k for k, _ in next(iter(samples))] if samples else []
            family = CounterMetricFamily(name, helps[name], labels=labelnames)
            for key, value in sorted(samples.items()):
                family.add_metric([v for _, v in key], value)
            yield family


class HubClient:
    """A worker's side: forwards updates to the parent's hub and fetches the server's exposition."""

    def __init__(self, directory: Path, worker: str, *, pid: int | None = None) -> None:
        self.worker = worker
        self._updates_path = str(directory / _UPDATES)
        self._scrapes_path = str(directory / _SCRAPES)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._pid = pid if pid is not None else os.getpid()
        self._failed = threading.Event()
        self._totals: list[Collector] = []
        self._totals_thread: threading.Thread | None = None

    @classmethod
    def from_environment(cls, environ: dict[str, str]) -> HubClient | None:
        """The client of a `serve --workers N` worker (GATEWAY_METRICS_HUB set); None in a single process."""
        directory = environ.get(HUB_ENV)
        if not directory:
            return None
        return cls(Path(directory), environ.get(WORKER_ENV, "0"))

    @property
    def pid(self) -> int:
        return self._pid

    def child(self, name: str, labels: tuple[str, ...]) -> _Forwarded:
        return _Forwarded(self, name, labels)

    def serving(self) -> None:
        self.send(["up", self.worker, self._pid])

    def add_totals(self, collector: Collector) -> None:
        self._totals.append(collector)
        if self._totals_thread is None:
            self._totals_thread = threading.Thread(target=self._send_totals, name="gateway-metrics-totals",
                                                   daemon=True)
            self._totals_thread.start()

    def send(self, message: list[Any]) -> None:
        try:
            self._socket.sendto(json.dumps(message, separators=(",", ":")).encode(), self._updates_path)
        except OSError as exc:
            # Metrics must not fail requests; the parent is gone (this worker ends with it: lifeline.py).
            if not self._failed.is_set():
                self._failed.set()
                log.error("metrics: the supervising process does not take updates (%s); /metrics misses this "
                          "worker's requests from now on", exc)

    def render(self) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(SCRAPE_TIMEOUT_S)
            connection.connect(self._scrapes_path)
            chunks = []
            while chunk := connection.recv(1 << 16):
                chunks.append(chunk)
        return b"".join(chunks)

    def _send_totals(self) -> None:
        stop = threading.Event()
        while not stop.wait(TOTALS_INTERVAL_S):
            families = [[family.name, family.documentation,
                         [[sample.labels, sample.value] for sample in family.samples if sample.name.endswith("_total")]]
                        for collector in self._totals for family in collector.collect() if family.type == "counter"]
            self.send(["totals", self._pid, families])


class _Forwarded:
    """One series as a worker sees it: its updates go to the parent."""

    __slots__ = ("_client", "_name", "_labels")

    def __init__(self, client: HubClient, name: str, labels: tuple[str, ...]) -> None:
        self._client, self._name, self._labels = client, name, labels

    def inc(self, amount: float = 1.0) -> None:
        self._client.send(["m", self._client.pid, self._name, self._labels, "inc", amount])

    def observe(self, value: float) -> None:
        self._client.send(["m", self._client.pid, self._name, self._labels, "observe", value])

    def set(self, value: float) -> None:
        self._client.send(["m", self._client.pid, self._name, self._labels, "set", value])
