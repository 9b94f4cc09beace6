"""Where a request's blocking work (embedding, Milvus calls, CPU-heavy stages) runs.

An admitted request runs wholly on one request worker (gateway/admission/workers.py), a thread
that serves that request alone; its blocking calls run right there, inline, with no hand-off to
another thread. Fairness between tenants is decided once, when a worker takes the request, by
fair queueing over admitted cost. Work outside a request (the CLI, start-up, ingest jobs) has
no lane and runs on asyncio's default executor.

Blocking work whose request is past its deadline is not started.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
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
    """Whether the current request could run `jobs` blocking jobs side by side. On a request worker
    it cannot: the worker is the request's one thread, and every extra hand-off between threads
    costs CPU that other requests need. Outside a request it can."""
    lane = _lane.get()
    return lane is None or lane.thread is not threading.current_thread()


async def offload(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking `fn(*args)`: inline on the request's worker, else on the default executor."""
    lane = _lane.get()
    if lane is None or lane.thread is not threading.current_thread():
        return await asyncio.to_thread(_checked, fn, *args)
    return _checked(fn, *args)


def _checked(fn: Callable[..., T], *args: Any) -> T:
    deadline = current_deadline()
    if deadline is not None:
        deadline.check(getattr(fn, "__qualname__", "blocking work"))
    return fn(*args)
