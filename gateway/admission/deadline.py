"""Server-side deadlines, checked cooperatively between stages and batches.

A request's `Deadline` travels in a context variable, so it reaches code that knows nothing
about requests (a stage, the embedder's batch loop) and, because the fair scheduler and
`asyncio.to_thread` copy the context, work already running in a worker thread. Python cannot
interrupt a thread, so long loops call `check_deadline()` between units of work instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gateway.errors import DeadlineExceeded


class Deadline:
    """A budget in seconds from now; `cancel()` (a client that went away) ends it early too."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if budget_s <= 0:
            raise ValueError(f"a deadline needs a positive budget, got {budget_s}")
        self.budget_s = budget_s
        self._clock = clock
        self._started = clock()
        self._cancelled = threading.Event()
        self._done: list[str] = []
        self._lock = threading.Lock()

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    @property
    def remaining_s(self) -> float:
        return self.budget_s - self.elapsed_s

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def expired(self) -> bool:
        return self.cancelled or self.remaining_s <= 0

    def cancel(self) -> None:
        self._cancelled.set()

    def done(self, step: str) -> None:
        """Record a finished step, so that an overrun can say what was done."""
        with self._lock:
            self._done.append(step)

    @property
    def steps_done(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._done)

    def check(self, where: str) -> None:
        """Raises DeadlineExceeded when the budget is spent or the client went away."""
        if not self.expired():
            return
        done = ", ".join(self.steps_done) or "nothing"
        if self.cancelled:
            raise DeadlineExceeded(f"request cancelled before {where}: the client disconnected; done: {done}")
        raise DeadlineExceeded(f"deadline of {self.budget_s * 1000:.0f} ms exceeded after "
                               f"{self.elapsed_s * 1000:.0f} ms, before {where}; done: {done}")


_current: ContextVar[Deadline | None] = ContextVar("gateway_deadline", default=None)


def current_deadline() -> Deadline | None:
    return _current.get()


@contextmanager
def deadline_scope(deadline: Deadline) -> Iterator[Deadline]:
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)


def check_deadline(where: str) -> None:
    """Stop here if the current request is past its deadline; a no-op outside requests."""
    deadline = _current.get()
    if deadline is not None:
        deadline.check(where)


def step_done(step: str) -> None:
    deadline = _current.get()
    if deadline is not None:
        deadline.done(step)
