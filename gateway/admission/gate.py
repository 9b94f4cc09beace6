"""Per-tenant admission: a cost ceiling, request and cost rates, a concurrency cap and a short queue.

In order: a request over the tenant's cost ceiling is refused (LIMIT_EXCEEDED, it can never
run); one over the request rate or the cost rate is refused with the time until it would fit
(RATE_LIMITED, HTTP 429 + Retry-After); then it takes one of the tenant's concurrency slots,
or waits for one in a bounded FIFO queue, or is refused when the queue is full or the wait
runs out. A slot needs room in two budgets: the number of requests executing, and the sum of
their estimated costs (`max_inflight_cost`; a request runs alone when it is bigger than that),
so a tenant can have many small requests in flight but only one or two huge ones. One tenant's
queue never holds up another's.

State is kept only for tenants that need it: one that has nothing in flight or waiting and whose
buckets have refilled is indistinguishable from a new one, so it is dropped once more than
`max_tenants` are held (least recently used first). An idle tenant costs nothing here.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum

from gateway.admission.bucket import TokenBucket
from gateway.admission.limits import TenantLimits
from gateway.errors import LimitExceeded, RateLimited


class Refusal(StrEnum):
    """Why a request was refused (the `reason` label of gateway_rejections_total)."""

    COST_CEILING = "cost_ceiling"
    RATE = "rate"
    COST_RATE = "cost_rate"
    QUEUE_FULL = "queue_full"
    QUEUE_TIMEOUT = "queue_timeout"
    STREAMS = "streams"  # GET /mcp streams over their own budget (gateway/mcp/streams.py)


class AdmissionObserver:
    """What admission reports (metrics); the default reports nothing."""

    def in_flight(self, tenant: str, count: int) -> None: ...

    def queued(self, tenant: str, count: int) -> None: ...

    def refused(self, tenant: str, reason: Refusal) -> None: ...

    def streams_open(self, tenant: str, count: int) -> None: ...


@dataclass
class _TenantState:
    limits: TenantLimits
    requests: TokenBucket
    costs: TokenBucket
    in_flight: int = 0
    in_flight_cost: int = 0
    waiters: deque[tuple[asyncio.Future[None], int]] = field(default_factory=deque)

    def fits(self, cost: int) -> bool:
        return self.in_flight < self.limits.max_concurrent and (
            self.in_flight == 0 or self.in_flight_cost + cost <= self.limits.max_inflight_cost)

    def idle(self) -> bool:
        """Nothing in flight or waiting, and both buckets full again: a fresh state would be the same."""
        return (not self.in_flight and not self.waiters and self.requests.available >= self.requests.burst
                and self.costs.available >= self.costs.burst)


# Tenants whose admission state a process holds before idle ones are dropped.
MAX_TENANTS = 4096


class Admission:
    """Admits requests per tenant; `async with admission.admit(tenant, cost):` holds a slot."""

    def __init__(self, limits_for: Callable[[str], TenantLimits], *,
                 observer: AdmissionObserver | None = None, clock: Callable[[], float] = time.monotonic,
                 max_tenants: int = MAX_TENANTS) -> None:
        self._limits_for = limits_for
        self._observer = observer or AdmissionObserver()
        self._clock = clock
        self._max_tenants = max_tenants
        self._tenants: OrderedDict[str, _TenantState] = OrderedDict()

    def limits(self, tenant: str) -> TenantLimits:
        return self._state(tenant).limits

    def held(self) -> int:
        """Tenants whose admission state is kept."""
        return len(self._tenants)

    def refresh(self, tenant: str) -> None:
        """The tenant's limits changed: its next request reads them again (requests in flight keep
        the slots they hold)."""
        state = self._tenants.get(tenant)
        if state is not None and state.idle():
            del self._tenants[tenant]
        elif state is not None:
            state.limits = self._limits_for(tenant)

    def _state(self, tenant: str) -> _TenantState:
        state = self._tenants.get(tenant)
        if state is None:
            limits = self._limits_for(tenant)
            state = _TenantState(limits, TokenBucket(limits.rate, limits.burst, self._clock),
                                 TokenBucket(limits.cost_rate, limits.cost_burst, self._clock))
            self._tenants[tenant] = state
            self._drop_idle()
        else:
            self._tenants.move_to_end(tenant)
        return state

    def _drop_idle(self) -> None:
        """Past `max_tenants`, drop the least recently used idle states (busy ones stay: they are
        bounded by the requests in flight)."""
        excess = len(self._tenants) - self._max_tenants
        if excess <= 0:
            return
        for tenant in list(self._tenants)[:-1]:
            if self._tenants[tenant].idle():
                del self._tenants[tenant]
                excess -= 1
                if not excess:
                    return

    def in_flight(self, tenant: str) -> int:
        return self._state(tenant).in_flight

    def queued(self, tenant: str) -> int:
        return len(self._state(tenant).waiters)

    @asynccontextmanager
    async def admit(self, tenant: str, cost: int) -> AsyncIterator[None]:
        await self._enter(tenant, cost)
        try:
            yield
        finally:
            self._leave(tenant, cost)

    async def _enter(self, tenant: str, cost: int) -> None:
        state = self._state(tenant)
        limits = state.limits
        if cost > limits.max_cost:
            self._observer.refused(tenant, Refusal.COST_CEILING)
            raise LimitExceeded(f"request cost {cost} units is over tenant {tenant!r}'s ceiling of "
                                f"{limits.max_cost} units per request; ask for fewer searches, a lower limit, "
                                f"fewer filter values or a lighter pipeline (docs/operations.md, cost model)")
        wait = state.requests.take(1)
        if wait:
            self._refuse(tenant, Refusal.RATE, wait,
                         f"tenant {tenant!r} is over its rate of {limits.rate:g} requests/s "
                         f"(burst {limits.burst})")
        wait = state.costs.take(cost)
        if wait:
            state.requests.give_back(1)
            self._refuse(tenant, Refusal.COST_RATE, wait,
                         f"request cost {cost} units is over tenant {tenant!r}'s remaining cost budget "
                         f"({state.costs.available:.0f} units; it refills at {limits.cost_rate:g} units/s)")
        if not state.waiters and state.fits(cost):
            self._take_slot(tenant, state, cost)
            return
        if len(state.waiters) >= limits.queue_size:
            self._refund(state, cost)
            self._refuse(tenant, Refusal.QUEUE_FULL, self._slot_wait(limits),
                         f"tenant {tenant!r} has {state.in_flight} requests running (limit "
                         f"{limits.max_concurrent}; {state.in_flight_cost} of {limits.max_inflight_cost} cost "
                         f"units in flight) and {len(state.waiters)} waiting (queue limit {limits.queue_size})")
        await self._wait_for_slot(tenant, state, cost)

    async def _wait_for_slot(self, tenant: str, state: _TenantState, cost: int) -> None:
        limits = state.limits
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (waiter, cost)
        state.waiters.append(entry)
        self._observer.queued(tenant, len(state.waiters))
        try:
            await asyncio.wait_for(asyncio.shield(waiter), limits.queue_timeout_s)
        except TimeoutError:
            if waiter.done() and not waiter.cancelled():
                return  # the slot was handed over just as the wait ran out: keep it
            self._refund(state, cost)
            self._refuse(tenant, Refusal.QUEUE_TIMEOUT, self._slot_wait(limits),
                         f"tenant {tenant!r} waited {limits.queue_timeout_s:g} s for one of its "
                         f"{limits.max_concurrent} concurrent slots ({limits.max_inflight_cost} cost units "
                         f"in flight at most)")
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._leave(tenant, cost)  # handed a slot, but the caller went away: pass it on
            raise
        finally:
            if entry in state.waiters:
                state.waiters.remove(entry)
            waiter.cancel()
            self._observer.queued(tenant, len(state.waiters))

    def _take_slot(self, tenant: str, state: _TenantState, cost: int) -> None:
        state.in_flight += 1
        state.in_flight_cost += cost
        self._observer.in_flight(tenant, state.in_flight)

    def _leave(self, tenant: str, cost: int) -> None:
        state = self._state(tenant)
        state.in_flight -= 1
        state.in_flight_cost -= cost
        # Hand slots straight to the oldest waiters that fit, in order, so a newcomer cannot
        # jump the queue (and a big request at the head is not overtaken by small ones).
        while state.waiters:
            waiter, wanted = state.waiters[0]
            if waiter.done():
                state.waiters.popleft()
                continue
            if not state.fits(wanted):
                break
            state.waiters.popleft()
            state.in_flight += 1
            state.in_flight_cost += wanted
            waiter.set_result(None)
        self._observer.in_flight(tenant, state.in_flight)
        self._observer.queued(tenant, len(state.waiters))

    @staticmethod
    def _refund(state: _TenantState, cost: int) -> None:
        state.requests.give_back(1)
        state.costs.give_back(cost)

    @staticmethod
    def _slot_wait(limits: TenantLimits) -> float:
        # Nothing says when a slot frees; a slot-holder's deadline bounds it, a second is typical.
        return min(1.0, limits.deadline_s)

    def _refuse(self, tenant: str, reason: Refusal, wait_s: float, why: str) -> None:
        self._observer.refused(tenant, reason)
        retry = retry_after(wait_s)
        raise RateLimited(f"{why}; retry after {retry} s", reason=reason.value, retry_after_s=retry)


def retry_after(wait_s: float) -> int:
    """Whole seconds for a Retry-After header: at least 1, rounded up."""
    if math.isinf(wait_s):
        return 3600
    return max(1, math.ceil(wait_s))
