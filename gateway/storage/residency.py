"""Which collections stay loaded in the engine's memory: idle tenants' are released.

A loaded collection holds its vectors and its BM25 index in memory (in milvus-lite's process, or
a Milvus query node). A tenant that has not searched a collection for `idle_s` seconds is
inactive there: the sweep releases the collection, and the tenant's next search loads it again,
paying that load once; its trace says so (`loads_recorded`). Collections shared by several
tenants (partition-key layout) are never released by one tenant's idleness.

Another process on the same store may still hold the collection as loaded; its next call finds
it released and loads it again (gateway/storage/guard.py), so a release never fails a search.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Load:
    """A collection this request had to load into memory before searching it."""

    collection: str
    seconds: float


_loads: ContextVar[list[Load] | None] = ContextVar("gateway_collection_loads", default=None)


@contextmanager
def loads_recorded() -> Iterator[list[Load]]:
    """Collect the loads made inside (by this request, on whatever thread its work runs)."""
    loads: list[Load] = []
    token = _loads.set(loads)
    try:
        yield loads
    finally:
        _loads.reset(token)


def record_load(collection: str, seconds: float) -> None:
    loads = _loads.get()
    if loads is not None:
        loads.append(Load(collection, seconds))


class Residency:
    """Last use of each loaded collection this process searched; `idle()` lists those to release."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._used: dict[str, tuple[float, tuple[str, ...]]] = {}  # chunks name -> (last use, names to release)
        self._lock = threading.Lock()

    def touch(self, chunks: str, names: tuple[str, ...]) -> None:
        self._used[chunks] = (self._clock(), names)  # one dict store: no lock on the search path

    def forget(self, chunks: str) -> None:
        with self._lock:
            self._used.pop(chunks, None)

    def idle(self, idle_s: float) -> list[tuple[str, tuple[str, ...]]]:
        """(chunks name, every collection name to release) of collections unused for `idle_s`."""
        cutoff = self._clock() - idle_s
        with self._lock:
            return [(chunks, names) for chunks, (used, names) in list(self._used.items()) if used < cutoff]

    def still_idle(self, chunks: str, idle_s: float) -> bool:
        entry = self._used.get(chunks)
        return entry is not None and entry[0] < self._clock() - idle_s

    def __len__(self) -> int:
        return len(self._used)


async def release_idle_forever(release: Callable[[float], list[str]], idle_s: float) -> None:
    """Every quarter of `idle_s` (at most a minute), release what has been idle that long."""
    interval = min(60.0, max(1.0, idle_s / 4))
    while True:
        await asyncio.sleep(interval)
        try:
            released = await asyncio.to_thread(release, idle_s)
        except Exception as exc:  # storage down: the next sweep tries again; searches report it
            log.warning("releasing idle collections failed: %s", exc)
            continue
        if released:
            log.info("released %d idle collections from memory (unused for %.0f s)", len(released), idle_s)
