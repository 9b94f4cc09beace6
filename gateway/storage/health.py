"""Whether the milvus-lite server behind a served store answers: a probe every quarter second.

A stopped (SIGSTOP) or wedged server still accepts TCP connections, so every call to it would wait
for its request's full deadline, holding a worker thread; a server being restarted (a crash, a
rolling restart) refuses connections for a second or two. `GuardedClient` asks `StoreHealth`
before each call:

- UP: go.
- DOWN (connections refused: the supervisor is restarting it, or a new `gateway serve` is taking
  over): wait up to `wait_s` for it to come back, then go; a restart costs latency, not errors.
- HUNG (it accepts connections but did not answer `hung_after` probes in a row, each within
  `probe_timeout_s`, and used no CPU meanwhile or is stopped): fail at once; GuardedClient also
  closes its channel, which cancels the calls already waiting on it. A server that is slow to
  answer because it is busy (its CPU time grows) is not hung: its callers wait, as before.
- REFUSED (the supervisor found damage and does not start it, storage/server.py): fail at once.

Client-facing messages name the state, never the server's address; `reason` (for /readyz and the
log) says more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from gateway.errors import StorageUnavailable
from gateway.storage.record import StorePaths
from gateway.storage.server import ServerLocation, authorization, read_location

log = logging.getLogger(__name__)

# A restart (child start ~1.5 s, a takeover a little more) fits well inside a request's
# default 15 s deadline with room left for the call itself.
RESTART_WAIT_S = 8.0
PROBE_INTERVAL_S = 0.25
# CheckHealth is answered without touching the engine; only a full thread pool (10 calls each
# longer than this) or a stopped process makes it this slow.
PROBE_TIMEOUT_S = 1.0
HUNG_AFTER = 2


class Health(StrEnum):
    UP = "up"
    DOWN = "down"
    HUNG = "hung"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class HealthReport:
    state: Health
    reason: str
    location: ServerLocation

    def client_message(self) -> str:
        """What a client is told: what is wrong and when to retry, not where the store listens."""
        retry = "retry in a few seconds; GET /readyz answers 200 again once storage is back"
        if self.state is Health.HUNG:
            return f"storage is not answering (no reply to health probes); {retry}"
        if self.state is Health.REFUSED:
            return ("storage is stopped: the gateway found the store damaged and did not restart it; "
                    "an operator must restore it (GET /readyz says why)")
        return f"storage is restarting and did not come back in time; {retry}"


class StoreHealth:
    """Probes the server named in `x.server.json` (following it when a new supervisor moves it)."""

    def __init__(self, paths: StorePaths, location: ServerLocation, *, wait_s: float = RESTART_WAIT_S,
                 interval_s: float = PROBE_INTERVAL_S, probe_timeout_s: float = PROBE_TIMEOUT_S,
                 hung_after: int = HUNG_AFTER) -> None:
        self.wait_s = wait_s
        self._paths = paths
        self._interval_s = interval_s
        self._probe_timeout_s = probe_timeout_s
        self._hung_after = hung_after
        self._report = HealthReport(Health.UP, "", location)
        self._changed = threading.Condition()
        self._listeners: list[Callable[[HealthReport, HealthReport], None]] = []
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-store-probe", daemon=True)
        self._thread.start()

    @property
    def report(self) -> HealthReport:
        return self._report

    def on_change(self, listener: Callable[[HealthReport, HealthReport], None]) -> None:
        """`listener(before, after)` runs on the probe thread whenever the state or location changes."""
        self._listeners.append(listener)

    def admit(self, until: float | None = None) -> ServerLocation:
        """The location to call; waits (until `until`, or `wait_s`) while the store is DOWN, and
        raises StorageUnavailable at once when it is HUNG or REFUSED."""
        deadline = until if until is not None else time.monotonic() + self.wait_s
        with self._changed:
            while self._report.state is Health.DOWN and (remaining := deadline - time.monotonic()) > 0:
                self._changed.wait(remaining)
            report = self._report
        if report.state is Health.UP:
            return report.location
        raise StorageUnavailable(report.client_message())

    def lost(self, reason: str) -> None:
        """A call found no server: DOWN until a probe (run now) says otherwise."""
        with self._changed:
            before = self._report
            if before.state is Health.UP:
                self._set(HealthReport(Health.DOWN, reason, before.location))
        self._notify(before, self._report)
        self._wake.set()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=self._probe_timeout_s + 1)

    def _set(self, report: HealthReport) -> None:
        """Under `_changed`; `_notify` after releasing it."""
        self._report = report
        self._changed.notify_all()

    def _notify(self, before: HealthReport, report: HealthReport) -> None:
        if (before.state, before.location) != (report.state, report.location):
            if report.state is not Health.UP:
                log.warning("milvus-lite server for %s is %s: %s", self._paths.store, report.state, report.reason)
            elif before.state is not Health.UP:
                log.info("milvus-lite server for %s answers again", self._paths.store)
            for listener in self._listeners:
                listener(before, report)

    def _run(self) -> None:
        import grpc
        from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

        channel: grpc.Channel | None = None
        probed: ServerLocation | None = None
        timeouts = 0
        cpu_before: tuple[str, int] | None = None
        while not self._closed.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._closed.is_set():
                break
            location = self._current_location()
            if probed is None or (location.uri, location.token) != (probed.uri, probed.token):
                if channel is not None:
                    channel.close()
                channel = grpc.insecure_channel(location.uri.split("://", 1)[-1])
                # One stub per channel: building one binds every Milvus method (a hundred-odd),
                # which, four times a second, was 5% of a loaded gateway's Python time.
                stub = milvus_pb2_grpc.MilvusServiceStub(channel)
                probed, timeouts = location, 0
            if location.refused:
                report = HealthReport(Health.REFUSED, location.refused, location)
            else:
                try:
                    cpu_before = _cpu(location.pid)
                    stub.CheckHealth(milvus_pb2.CheckHealthRequest(), timeout=self._probe_timeout_s,
                                     metadata=(("authorization", authorization(location.token)),))
                    timeouts = 0
                    report = HealthReport(Health.UP, "", location)
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                        cpu, working = _cpu(location.pid), False
                        if cpu is not None and cpu_before is not None:
                            working = cpu[0] != "T" and cpu[1] > cpu_before[1]
                        timeouts = 0 if working else timeouts + 1
                        if timeouts < self._hung_after:
                            continue
                        report = HealthReport(Health.HUNG, (
                            f"the milvus-lite server (pid {location.pid}) accepts connections but answered none "
                            f"of {timeouts} health probes within {self._probe_timeout_s:g} s each, and is "
                            "stopped or used no CPU meanwhile"), location)
                    else:
                        timeouts = 0
                        report = HealthReport(Health.DOWN, (
                            f"the milvus-lite server does not answer ({exc.code().name}): the supervising "
                            "gateway serve is restarting it, or no gateway serve supervises it"), location)
            with self._changed:
                before = self._report
                self._set(report)
            self._notify(before, report)
        if channel is not None:
            channel.close()

    def _current_location(self) -> ServerLocation:
        """The location file as it is now; while it is missing (a takeover between two supervisors),
        the last one seen."""
        location = read_location(self._paths)
        if location is None or location.store != str(self._paths.store):
            return self._report.location
        return location


def _cpu(pid: int) -> tuple[str, int] | None:
    """The process's state letter and CPU time in clock ticks (user + system), from /proc; None
    where that cannot be read (no /proc, or another user's process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    return fields[0], int(fields[11]) + int(fields[12])
