"""The server's processes as Prometheus series: per-worker liveness and restarts, and CPU, memory and
open file descriptors of each process (the supervising parent and every worker), read from /proc.

`worker` is the worker's index ("0", "1", ...; a restarted worker keeps its index and gets a new pid)
or "supervisor" for the `serve --workers N` parent, which serves no requests; other processes of
the server (the milvus-lite server `serve` supervises) have usage series under their own name.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

SUPERVISOR = "supervisor"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class ProcessUsage:
    """What one process costs now; None where /proc could not say (the process is gone)."""

    cpu_seconds: float
    resident_bytes: int
    open_fds: int


def usage(pid: int) -> ProcessUsage | None:
    """CPU seconds (user + system), resident memory and open fds of `pid`, from Linux's /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        with open(f"/proc/{pid}/statm", "rb") as handle:
            resident_pages = int(handle.read().split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError, IndexError):
        return None
    # The command name (field 2) may hold spaces and parentheses: fields are counted after its last ")".
    fields = stat[stat.rindex(b")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])
    return ProcessUsage((utime + stime) / _CLOCK_TICKS, resident_pages * _PAGE_BYTES, fds)


@dataclass
class _Worker:
    pid: int
    up: bool = False
    restarts: int = 0


class ServerProcesses(Collector):
    """Which worker runs as which pid, whether it serves, how often it was replaced; and each process's usage.

    The supervisor (or, with one process, the app itself) reports `started`, `serving` and `gone`.
    """

    def __init__(self, supervisor_pid: int | None = None) -> None:
        self._supervisor = supervisor_pid
        self._workers: dict[str, _Worker] = {}
        self._watched: dict[str, Callable[[], int | None]] = {}
        self._lock = threading.Lock()

    def watch(self, name: str, pid: Callable[[], int | None]) -> None:
        """Usage series for another process of the server; `pid` says which one it is now (None: none)."""
        with self._lock:
            self._watched[name] = pid

    def started(self, worker: str, pid: int, *, restart: bool = False) -> None:
        """`worker` now runs as `pid`, not serving yet; `restart`: in place of one that died."""
        with self._lock:
            previous = self._workers.get(worker)
            restarts = previous.restarts if previous is not None else 0
            self._workers[worker] = _Worker(pid, restarts=restarts + 1 if restart else restarts)

    def serving(self, worker: str, pid: int) -> None:
        with self._lock:
            current = self._workers.get(worker)
            if current is None:
                self._workers[worker] = _Worker(pid, up=True)
            elif current.pid == pid:
                current.up = True

    def gone(self, worker: str, pid: int) -> None:
        with self._lock:
            current = self._workers.get(worker)
            if current is not None and current.pid == pid:
                current.up = False

    def pid(self, worker: str) -> int | None:
        with self._lock:
            current = self._workers.get(worker)
            return current.pid if current is not None else None

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        with self._lock:
            workers = sorted((name, _Worker(w.pid, w.up, w.restarts)) for name, w in self._workers.items())
            watched = list(self._watched.items())
        up = GaugeMetricFamily("gateway_worker_up", "1 while the worker process serves requests, 0 when it "
                               "has died or not finished starting", labels=["worker"])
        restarts = CounterMetricFamily("gateway_worker_restarts", "Worker processes replaced after they died",
                                       labels=["worker"])
        for name, worker in workers:
            up.add_metric([name], 1 if worker.up else 0)
            restarts.add_metric([name], worker.restarts)
        yield up
        yield restarts
        cpu = CounterMetricFamily("gateway_process_cpu_seconds", "User and system CPU time of each process",
                                  labels=["worker", "pid"])
        memory = GaugeMetricFamily("gateway_process_resident_memory_bytes", "Resident memory of each process",
                                   labels=["worker", "pid"])
        fds = GaugeMetricFamily("gateway_process_open_fds", "Open file descriptors of each process",
                                labels=["worker", "pid"])
        processes = [(name, w.pid) for name, w in workers]  # a starting worker costs memory too
        if self._supervisor is not None:
            processes.insert(0, (SUPERVISOR, self._supervisor))
        processes += [(name, pid) for name, pid in ((name, current()) for name, current in watched) if pid is not None]
        for name, pid in processes:
            measured = usage(pid)
            if measured is None:
                continue
            cpu.add_metric([name, str(pid)], measured.cpu_seconds)
            memory.add_metric([name, str(pid)], measured.resident_bytes)
            fds.add_metric([name, str(pid)], measured.open_fds)
        yield cpu
        yield memory
        yield fds
