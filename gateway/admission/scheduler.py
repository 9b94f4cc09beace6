"""Where a request's blocking work (embedding, Milvus calls, CPU-heavy stages) runs.

An admitted request runs wholly on one request worker (gateway/admission/workers.py), a thread
that serves that request alone; its blocking calls run right there, inline, with no hand-off to
another thread. Fairness between tenants is decided once, when a worker takes the request, by
fair queueing over admitted cost. Work outside a request (the CLI, start-up, ingest jobs) has
no lane and runs on asyncio's default executor.

A request's independent parts (`fan_out`: a pipeline's planned queries, a federated search's
collections) may run their blocking calls side by side on idle request workers the request
borrows (RequestWorkers.lend), so four planned queries take about as long as one; with no idle
worker to borrow, they run inline as everything else.

Blocking work whose request is past its deadline is not started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gateway.admission.deadline import current_deadline

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Lane:
    """The current request's tenant, and the worker thread it runs on (its blocking calls run
    inline there; on any other thread they go to the default executor)."""

    tenant: str
    thread: threading.Thread | None = field(default=None, compare=False)
    # Borrows an idle request worker for one blocking call (RequestWorkers.lend); None: never.
    lend: Callable[..., concurrent.futures.Future | None] | None = field(default=None, compare=False)


_lane: ContextVar[Lane | None] = ContextVar("gateway_lane", default=None)
# Set inside `fan_out`: the blocking calls of its parts may borrow idle workers.
_fanning: ContextVar[bool] = ContextVar("gateway_fanning", default=False)


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
    """Whether the current request could run `jobs` blocking jobs side by side. On a request worker
    it cannot: the worker is the request's one thread, and every extra hand-off between threads
    costs CPU that other requests need. Outside a request it can."""
    lane = _lane.get()
    return lane is None or lane.thread is not threading.current_thread()


async def offload(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking `fn(*args)`: inline on the request's worker (on a borrowed idle one inside
    `fan_out`, when there is one), else on the default executor."""
    lane = _lane.get()
    if lane is None or lane.thread is not threading.current_thread():
        return await asyncio.to_thread(_checked, fn, *args)
    if _fanning.get() and lane.lend is not None:
        borrowed = lane.lend(_checked, fn, *args)
        if borrowed is not None:
            return await asyncio.wrap_future(borrowed)
    return _checked(fn, *args)


async def fan_out(*parts: Awaitable[T], return_exceptions: bool = False) -> list[T]:
    """asyncio.gather for one request's independent parts, whose blocking calls may then run side by
    side on idle request workers (module docstring)."""
    token = _fanning.set(True)  # each part's task copies the context now, so it sees this
    try:
        return await asyncio.gather(*parts, return_exceptions=return_exceptions)
    finally:
        _fanning.reset(token)


def _checked(fn: Callable[..., T], *args: Any) -> T:
    deadline = current_deadline()
    if deadline is not None:
        deadline.check(getattr(fn, "__qualname__", "blocking work"))
    return fn(*args)
