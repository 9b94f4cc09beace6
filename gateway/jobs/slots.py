"""Job slots shared by tenants, handed out round-robin: a freed slot goes to the waiting tenant
served least recently, so one tenant's queue of large jobs never holds another's small one back
(before, one FIFO: a one-document job waited 500 s behind another tenant's two large jobs).

Jobs wait on the event loops of the request workers that started them (admission/workers.py),
so the slots are guarded by a thread lock and a grant is a concurrent.futures.Future each loop
can await.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from collections import deque


class FairSlots:
    """At most `size` holders at once; waiting tenants take turns, one job each.

        await slots.acquire("acme")   # waits while every slot is held
        try: ... finally: slots.release()
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._held = 0
        self._lock = threading.Lock()
        self._waiting: dict[str, deque[tuple[int, concurrent.futures.Future[None]]]] = {}
        self._served: dict[str, int] = {}  # tenant -> the turn it was last given a slot
        self._turns = itertools.count()

    @property
    def waiting(self) -> int:
        with self._lock:
            return sum(len(queue) for queue in self._waiting.values())

    async def acquire(self, tenant: str) -> None:
        granted: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            turn = next(self._turns)
            if self._held < self._size and not self._waiting:
                self._held += 1
                self._served[tenant] = turn
                return
            self._waiting.setdefault(tenant, deque()).append((turn, granted))
        try:
            await asyncio.wrap_future(granted)
        except asyncio.CancelledError:
            with self._lock:
                queue = self._waiting.get(tenant, deque())
                still_waiting = any(future is granted for _, future in queue)
                if still_waiting:
                    queue.remove(next(entry for entry in queue if entry[1] is granted))
                    if not queue:
                        del self._waiting[tenant]
            if not still_waiting:  # the slot was granted as the wait was cancelled: hand it on
                self.release()
            raise

    def release(self) -> None:
        with self._lock:
            self._held -= 1
            if not self._waiting or self._held >= self._size:
                return
            # Least recently served first; among tenants never served, the one waiting longest.
            tenant = min(self._waiting, key=lambda t: (self._served.get(t, -1), self._waiting[t][0][0]))
            queue = self._waiting[tenant]
            _, granted = queue.popleft()
            if not queue:
                del self._waiting[tenant]
            self._held += 1
            self._served[tenant] = next(self._turns)
        try:
            granted.set_result(None)
        except concurrent.futures.InvalidStateError:
            pass  # its wait was cancelled meanwhile, and that waiter hands the slot on
