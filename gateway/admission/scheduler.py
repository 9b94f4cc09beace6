"""Blocking work (embedding, Milvus calls, CPU-heavy stages) on worker threads, fair across tenants.

Python's default executor is one first-come-first-served queue: a tenant that submits 500
jobs makes everyone else's next job wait behind all of them. Here each tenant has its own
queue; workers take one job at a time from the tenants in turn (round-robin), and a tenant
runs at most `max_running` jobs at once, so a tenant with work waiting gets a worker after at
most one unit of another tenant's work.

Jobs whose caller has gone (cancelled future) or whose request is past its deadline are
dropped before they start.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.admission.deadline import current_deadline
from gateway.admission.threads import name_native_thread

T = TypeVar("T")


@dataclass(slots=True)
class _Job:
    future: concurrent.futures.Future
    context: contextvars.Context
    fn: Callable[..., Any]
    args: tuple[Any, ...]


class FairScheduler:
    """Worker threads draining per-tenant queues round-robin.

    `max_running(tenant)` caps how many workers one tenant holds at once; jobs over the cap
    wait in the tenant's queue while other tenants' jobs run.
    """

    def __init__(self, workers: int, max_running: Callable[[str], int] | int = 2,
                 on_queue_change: Callable[[str, int], None] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"a scheduler needs at least one worker, got {workers}")
        self.workers = workers
        self._max_running = max_running if callable(max_running) else (lambda tenant, n=max_running: n)
        self._on_queue_change = on_queue_change or (lambda tenant, queued: None)
        self._queues: dict[str, deque[_Job]] = {}
        self._ring: deque[str] = deque()    # tenants with queued jobs, in turn order
        self._running: dict[str, int] = {}
        self._idle = 0  # workers waiting for a job
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"gateway-blocking-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, tenant: str, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future:
        """Queue `fn(*args)` for `tenant`, run in a copy of the caller's context."""
        job = _Job(concurrent.futures.Future(), contextvars.copy_context(), fn, args)
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is shut down")
            queue = self._queues.setdefault(tenant, deque())
            queue.append(job)
            if tenant not in self._ring:
                self._ring.append(tenant)
            queued = len(queue)
            self._cond.notify()
        self._on_queue_change(tenant, queued)
        return job.future

    async def run(self, tenant: str, fn: Callable[..., T], *args: Any) -> T:
        """Await `fn(*args)` on a worker; cancelling the awaiting task drops a job not yet started."""
        return await asyncio.wrap_future(self.submit(tenant, fn, *args))

    def queued(self, tenant: str) -> int:
        with self._cond:
            return len(self._queues.get(tenant, ()))

    def running(self, tenant: str) -> int:
        with self._cond:
            return self._running.get(tenant, 0)

    def spare(self, tenant: str, jobs: int) -> bool:
        """Whether `jobs` more of the tenant's jobs would start at once: idle workers, and room under
        the tenant's cap. Read without the lock: a hint for splitting work, not a reservation."""
        return self._idle >= jobs and self._running.get(tenant, 0) + jobs <= self._max_running(tenant)

    def shutdown(self) -> None:
        """Stop the workers after the jobs already queued; later submits fail."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)

    def _next(self) -> tuple[str, _Job] | None:
        """The next tenant in turn that is under its running cap, and its oldest job."""
        for _ in range(len(self._ring)):
            tenant = self._ring[0]
            self._ring.rotate(-1)
            if self._running.get(tenant, 0) >= self._max_running(tenant):
                continue
            queue = self._queues[tenant]
            job = queue.popleft()
            if not queue:
                self._ring.remove(tenant)
                del self._queues[tenant]
            self._running[tenant] = self._running.get(tenant, 0) + 1
            return tenant, job
        return None

    def _work(self) -> None:
        name_native_thread()
        while True:
            with self._cond:
                picked = self._next()
                while picked is None:
                    if self._closed and not self._ring:
                        return
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                    picked = self._next()
                tenant, job = picked
                queued = len(self._queues.get(tenant, ()))
            self._on_queue_change(tenant, queued)
            try:
                self._run(job)
            finally:
                with self._cond:
                    self._running[tenant] -= 1
                    if not self._running[tenant]:
                        del self._running[tenant]
                # No wake-up here: the one job this frees (the tenant's next, if it was at its cap) is
                # taken by this worker itself as it loops. Waking every idle worker after every job
                # cost more CPU than the jobs' own Python on a busy machine.

    @staticmethod
    def _run(job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return  # the caller went away before the job started
        try:
            deadline = job.context.run(current_deadline)
            if deadline is not None:
                deadline.check(getattr(job.fn, "__qualname__", "blocking work"))
            result = job.context.run(job.fn, *job.args)
        except BaseException as exc:  # handed to the awaiting caller, which re-raises it
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)


@dataclass(frozen=True, slots=True)
class Lane:
    """Where the current request's blocking work goes: a scheduler and the tenant it is charged to."""

    scheduler: FairScheduler
    tenant: str


_lane: ContextVar[Lane | None] = ContextVar("gateway_lane", default=None)


@contextmanager
def lane_scope(lane: Lane) -> Iterator[Lane]:
    token = _lane.set(lane)
    try:
        yield lane
    finally:
        _lane.reset(token)


def current_tenant() -> str | None:
    lane = _lane.get()
    return lane.tenant if lane is not None else None


def spare_workers(jobs: int) -> bool:
    """Whether the current request could run `jobs` blocking jobs side by side right now. Work that
    can run as parallel jobs or as one (a hybrid search's two signals) splits only then: under load
    every extra hand-off between threads costs CPU that other requests need."""
    lane = _lane.get()
    return lane is None or lane.scheduler.spare(lane.tenant, jobs)


async def offload(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking `fn(*args)` off the event loop: on the request's fair lane when it has one
    (every admitted GraphQL request), else on asyncio's default executor (CLI, start-up)."""
    lane = _lane.get()
    if lane is None:
        return await asyncio.to_thread(fn, *args)
    return await lane.scheduler.run(lane.tenant, fn, *args)
