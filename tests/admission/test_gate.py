import asyncio

import pytest

from gateway.admission.gate import Admission, AdmissionObserver, Refusal, retry_after
from gateway.admission.limits import TenantLimits
from gateway.errors import LimitExceeded, RateLimited


def limits(**overrides) -> TenantLimits:
    values = dict(max_concurrent=2, queue_size=1, queue_timeout_s=5.0, rate=1000.0, burst=1000, max_cost=1000,
                  cost_rate=1000.0, cost_burst=1000, deadline_s=10.0, max_running=2)
    values.update(overrides)
    return TenantLimits(**values)


class Recorder(AdmissionObserver):
    def __init__(self) -> None:
        self.refusals: list[tuple[str, Refusal]] = []

    def refused(self, tenant: str, reason: Refusal) -> None:
        self.refusals.append((tenant, reason))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_cost_over_the_ceiling_is_refused_naming_cost_and_limit():
    recorder = Recorder()
    admission = Admission(lambda t: limits(max_cost=500), observer=recorder)
    with pytest.raises(LimitExceeded, match="request cost 501 units is over tenant 'acme'.s ceiling of 500 units"):
        async with admission.admit("acme", 501):
            pass
    assert recorder.refusals == [("acme", Refusal.COST_CEILING)]


async def test_request_rate_refusal_says_when_to_retry():
    clock = Clock()
    admission = Admission(lambda t: limits(rate=0.5, burst=2), clock=clock)
    for _ in range(2):
        async with admission.admit("acme", 1):
            pass
    with pytest.raises(RateLimited, match=r"over its rate of 0.5 requests/s \(burst 2\); retry after 2 s") as caught:
        async with admission.admit("acme", 1):
            pass
    assert caught.value.reason == "rate" and caught.value.retry_after_s == 2
    clock.now += 2
    async with admission.admit("acme", 1):
        pass


async def test_cost_rate_refusal_gives_the_request_token_back():
    clock = Clock()
    admission = Admission(lambda t: limits(rate=1.0, burst=2, cost_rate=100.0, cost_burst=1000), clock=clock)
    async with admission.admit("acme", 900):
        pass
    with pytest.raises(RateLimited, match=r"request cost 200 units is over tenant 'acme'.s remaining cost budget "
                                          r"\(100 units; it refills at 100 units/s\); retry after 1 s") as caught:
        async with admission.admit("acme", 200):
            pass
    assert caught.value.reason == "cost_rate"
    async with admission.admit("acme", 50):  # the refused request did not use up the second request token
        pass


async def test_concurrency_cap_queues_then_refuses_when_the_queue_is_full():
    recorder = Recorder()
    admission = Admission(lambda t: limits(max_concurrent=1, queue_size=1), observer=recorder)
    release = asyncio.Event()
    order: list[str] = []

    async def request(name: str) -> None:
        async with admission.admit("acme", 1):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(request("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(request("second"))
    await asyncio.sleep(0)
    assert admission.in_flight("acme") == 1 and admission.queued("acme") == 1
    with pytest.raises(RateLimited, match=r"1 requests running \(limit 1; 1 of 20000 cost units in flight\) "
                                          r"and 1 waiting \(queue limit 1\)") as caught:
        async with admission.admit("acme", 1):
            pass
    assert caught.value.reason == "queue_full"
    release.set()
    await asyncio.gather(first, second)
    assert order == ["first", "second"]
    assert admission.in_flight("acme") == 0 and admission.queued("acme") == 0
    assert recorder.refusals == [("acme", Refusal.QUEUE_FULL)]


async def test_queue_wait_runs_out_with_rate_limited():
    admission = Admission(lambda t: limits(max_concurrent=1, queue_size=4, queue_timeout_s=0.05))
    async with admission.admit("acme", 1):
        with pytest.raises(RateLimited, match="waited 0.05 s for one of its 1 concurrent slots") as caught:
            async with admission.admit("acme", 1):
                pass
    assert caught.value.reason == "queue_timeout"
    assert admission.queued("acme") == 0 and admission.in_flight("acme") == 0


async def test_one_tenant_at_its_limits_does_not_hold_up_another():
    admission = Admission(lambda t: limits(max_concurrent=1, queue_size=0))
    async with admission.admit("flooder", 1):
        with pytest.raises(RateLimited):
            async with admission.admit("flooder", 1):
                pass
        async with admission.admit("quiet", 1):
            assert admission.in_flight("quiet") == 1


async def test_a_cancelled_waiter_leaves_the_queue_and_the_slot_passes_on():
    admission = Admission(lambda t: limits(max_concurrent=1, queue_size=2))
    release = asyncio.Event()

    async def holder() -> None:
        async with admission.admit("acme", 1):
            await release.wait()

    async def waiter() -> str:
        async with admission.admit("acme", 1):
            return "admitted"

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    gone = asyncio.create_task(waiter())
    kept = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    gone.cancel()
    release.set()
    assert await kept == "admitted"
    await held
    assert admission.in_flight("acme") == 0 and admission.queued("acme") == 0


async def test_in_flight_cost_lets_many_small_requests_run_but_only_one_huge_one():
    admission = Admission(lambda t: limits(max_concurrent=4, queue_size=4, max_inflight_cost=1000, max_cost=5000,
                                                 cost_burst=100_000))
    release = asyncio.Event()
    running: list[str] = []

    async def request(name: str, cost: int) -> None:
        async with admission.admit("acme", cost):
            running.append(name)
            await release.wait()

    huge = [asyncio.create_task(request(f"huge-{i}", 5000)) for i in range(2)]
    await asyncio.sleep(0.01)
    assert running == ["huge-0"]  # bigger than the budget: runs, but alone
    small = asyncio.create_task(request("small", 10))
    await asyncio.sleep(0.01)
    assert running == ["huge-0"]  # FIFO: the small one does not overtake the waiting huge one
    release.set()
    await asyncio.gather(*huge, small)
    assert running == ["huge-0", "huge-1", "small"]
    assert admission.in_flight("acme") == 0


def test_limits_refuse_a_cost_burst_below_the_ceiling():
    with pytest.raises(ValueError, match="cost_burst 10 is below max_cost 20"):
        limits(max_cost=20, cost_burst=10)


@pytest.mark.parametrize("wait, header", [(0.01, 1), (1.0, 1), (1.2, 2), (float("inf"), 3600)])
def test_retry_after_is_whole_seconds_at_least_one(wait, header):
    assert retry_after(wait) == header


async def test_idle_tenants_state_is_bounded_and_busy_or_spent_tenants_keep_theirs():
    clock = Clock()
    admission = Admission(lambda t: limits(rate=1.0, burst=2), clock=clock, max_tenants=10)
    async with admission.admit("busy", 1):
        await admission._enter("spent", 1)  # one request's rate token spent, and still in flight
        admission._leave("spent", 1)
        for i in range(1_000):
            async with admission.admit(f"tenant-{i}", 1):
                pass
            clock.now += 1.0  # every bucket refills within a second: the tenant is idle again
        assert admission.held() <= 10
        assert admission.in_flight("busy") == 1  # still held while in flight
        # A tenant whose bucket has not refilled yet is not idle: its state stays (a fresh one
        # would hand it a new burst), so the bound is the tenants active within a refill.
        for i in range(20):
            async with admission.admit(f"other-{i}", 1):
                pass
        assert admission.held() == 21
    clock.now += 2.0
    async with admission.admit("last", 1):
        pass
    assert admission.held() <= 10


async def test_a_tenant_whose_state_was_dropped_starts_again_from_full_buckets_only_when_it_was_idle():
    clock = Clock()
    admission = Admission(lambda t: limits(rate=1.0, burst=1), clock=clock, max_tenants=1)
    async with admission.admit("acme", 1):
        pass
    # acme's one token is spent: its state is not idle, so a newcomer does not push it out.
    async with admission.admit("globex", 1):
        pass
    with pytest.raises(RateLimited):
        async with admission.admit("acme", 1):
            pass


async def test_refresh_reads_a_tenants_changed_limits():
    current = {"acme": limits(max_cost=100)}
    admission = Admission(lambda t: current[t])
    async with admission.admit("acme", 100):
        pass
    current["acme"] = limits(max_cost=50)
    admission.refresh("acme")
    with pytest.raises(LimitExceeded, match="ceiling of 50 units"):
        async with admission.admit("acme", 100):
            pass
