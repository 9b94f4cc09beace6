"""Query embeddings of concurrent requests run together, a few forward passes at a time.

A query is a few dozen tokens, and the int8 model's matrix products on so few rows use a core
badly: on one thread a query costs 5.3-5.5 ms of CPU alone, and 4.5 ms each when two or four run
in one pass (SciFact queries; the outputs are the same, padding being masked). So at most
`parallel` passes run at once (one per core by default); a query that arrives while they all run
waits, and the queries waiting when a pass ends run together in the next one, at most `most` of
them. Nobody waits for a batch to fill: one query alone on the machine runs at once.

There is no batching thread: the first query to find a free slot runs the pass on its own thread
(the request's worker), and when a pass ends its runner wakes the first waiting query, which runs
the next pass on its own thread with whatever else waits. Each waiter is woken once, with its
result or to run a pass.

At concurrency 8 on 2 cores beside two CPU-bound processes, 8 cycles interleaved with the code before
it, this took the gateway from 0.84x to 0.90x the QPS of the same work done plainly with the processes
in sessions of their own, and left it at 0.89x against 0.90x in one session (benchmarks/throughput.py,
docs/benchmarks.md); four passes at once instead of two gained less.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Queries in one pass at most. Two to four cost the least per query; with eight the padding to the
# longest wastes what batching saves (4.8 ms a query).
MOST = 4


@dataclass(slots=True)
class _Ask(Generic[T, R]):
    item: T
    done: threading.Event = field(default_factory=threading.Event)
    result: R | None = None
    error: BaseException | None = None
    runs: bool = False  # woken to run the next pass rather than with a result


class Batcher(Generic[T, R]):
    """`batcher.run(item)` returns `run_batch([..., item, ...])`'s answer for `item`, computed in a pass
    with whatever other items wait at the time (module docstring).

    `run_batch` takes a list of items and returns one answer per item, in order; an exception it
    raises reaches every caller whose item was in that pass.
    """

    def __init__(self, run_batch: Callable[[list[T]], Sequence[R]], parallel: int | None = None,
                 most: int = MOST) -> None:
        parallel = parallel if parallel is not None else (os.cpu_count() or 1)
        if parallel < 1 or most < 1:
            raise ValueError(f"a batcher needs at least one pass at once and one item a pass; "
                             f"got parallel={parallel}, most={most}")
        self._run_batch = run_batch
        self.parallel = parallel
        self.most = most
        self._lock = threading.Lock()
        self._waiting: deque[_Ask[T, R]] = deque()
        self._passes = 0  # passes running, or handed to a waiter that is about to run one

    def run(self, item: T) -> R:
        ask: _Ask[T, R] = _Ask(item)
        with self._lock:
            starts = self._passes < self.parallel
            if starts:
                self._passes += 1
                batch = [ask, *self._take(self.most - 1)]
            else:
                self._waiting.append(ask)
        if not starts:
            ask.done.wait()
            if not ask.runs:
                if ask.error is not None:
                    raise ask.error
                return ask.result  # type: ignore[return-value]
            with self._lock:
                batch = [ask, *self._take(self.most - 1)]
        try:
            results = self._run_batch([a.item for a in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} items got {len(results)} answers")
        except BaseException as exc:
            for other in batch[1:]:
                other.error = exc
                other.done.set()
            self._hand_on()
            raise
        for other, result in zip(batch[1:], results[1:]):
            other.result = result
            other.done.set()
        self._hand_on()
        return results[0]

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _take(self, count: int) -> list[_Ask[T, R]]:
        taken = []
        while self._waiting and len(taken) < count:
            taken.append(self._waiting.popleft())
        return taken

    def _hand_on(self) -> None:
        """A pass ended: the first waiter runs the next one (the slot passes to it), or the slot is free."""
        with self._lock:
            if not self._waiting:
                self._passes -= 1
                return
            following = self._waiting.popleft()
        following.runs = True
        following.done.set()
