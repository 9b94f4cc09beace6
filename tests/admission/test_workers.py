import asyncio
import threading
import time
from contextvars import ContextVar

import pytest

from gateway.admission.workers import RequestWorkers, default_workers


def wait_until(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


async def blocked(gate: threading.Event) -> None:
    await asyncio.to_thread(gate.wait)


async def note(order: list[str], label: str) -> str:
    order.append(label)
    return label


def test_tenants_take_turns_by_cost_instead_of_first_come_first_served():
    workers = RequestWorkers(1, max_running=10)
    gate = threading.Event()
    order: list[str] = []
    try:
        first = workers.submit("flooder", 100, blocked(gate))
        wait_until(lambda: workers.running("flooder") == 1)
        flood = [workers.submit("flooder", 100, note(order, f"flooder-{i}")) for i in range(6)]
        quiet = [workers.submit("quiet", 10, note(order, f"quiet-{i}")) for i in range(3)]
        gate.set()
        for future in [first, *flood, *quiet]:
            future.result(timeout=10)
    finally:
        workers.shutdown()
    # The flooder's running request already used 100 units of its share; the quiet tenant's three
    # cheap requests cost less together, so they all run before any of the flooder's six queued
    # ones, though they came after them.
    assert order == ["quiet-0", "quiet-1", "quiet-2", *(f"flooder-{i}" for i in range(6))], order


def test_one_tenant_holds_at_most_max_running_workers_and_others_find_one_free():
    workers = RequestWorkers(3, max_running=lambda tenant: 2)
    gate = threading.Event()
    try:
        held = [workers.submit("flooder", 1, blocked(gate)) for _ in range(5)]
        wait_until(lambda: workers.running("flooder") == 2)
        assert workers.queued("flooder") == 3
        assert workers.submit("quiet", 1, note([], "answered")).result(timeout=10) == "answered"
        gate.set()
        for future in held:
            future.result(timeout=10)
    finally:
        workers.shutdown()


def test_threads_are_fixed_and_an_idle_tenant_holds_no_state():
    before = set(threading.enumerate())
    workers = RequestWorkers(2)
    try:
        futures = [workers.submit(f"tenant-{i}", 1, note([], str(i))) for i in range(500)]
        assert [f.result(timeout=30) for f in futures] == [str(i) for i in range(500)]
        # 500 tenants, and the only threads started are the pool's two.
        assert set(threading.enumerate()) - before == set(workers.threads)
        wait_until(lambda: workers.tenants_held() == 0)
    finally:
        workers.shutdown()
    assert not any(thread.is_alive() for thread in workers.threads)


async def test_a_request_runs_wholly_on_one_worker_with_the_callers_context_and_errors():
    marker: ContextVar[str] = ContextVar("marker", default="unset")
    workers = RequestWorkers(2)

    async def where() -> tuple[str, str]:
        first = threading.current_thread().name
        await asyncio.sleep(0)
        return first, threading.current_thread().name, marker.get()

    async def boom() -> None:
        raise KeyError("from the worker")

    try:
        marker.set("request-1")
        first, last, seen = await workers.run("acme", 1, where())
        with pytest.raises(KeyError, match="from the worker"):
            await workers.run("acme", 1, boom())
    finally:
        workers.shutdown()
    assert first == last and first.startswith("gateway-worker-") and seen == "request-1"


async def test_a_request_whose_caller_went_away_never_starts_and_a_running_one_is_cancelled():
    workers = RequestWorkers(1)
    gate = threading.Event()
    ran: list[str] = []
    cancelled = threading.Event()

    async def long() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    try:
        blocker = workers.submit("acme", 1, blocked(gate))
        queued = asyncio.ensure_future(workers.run("acme", 1, note(ran, "late")))
        await asyncio.sleep(0.05)
        queued.cancel()
        await asyncio.sleep(0.05)
        gate.set()
        blocker.result(timeout=10)
        running = asyncio.ensure_future(workers.run("acme", 1, long()))
        await asyncio.to_thread(wait_until, lambda: workers.running("acme") == 1)
        running.cancel()
        assert await asyncio.to_thread(cancelled.wait, 10)
        assert await workers.run("acme", 1, note(ran, "next")) == "next"
    finally:
        workers.shutdown()
    assert ran == ["next"]


def test_workers_refuse_requests_after_shutdown_and_need_a_worker():
    workers = RequestWorkers(1)
    workers.shutdown()
    coro = note([], "x")
    with pytest.raises(RuntimeError, match="shut down"):
        workers.submit("acme", 1, coro)
    with pytest.raises(ValueError, match="at least one worker"):
        RequestWorkers(0)
    assert default_workers(1) == 8 and default_workers(8) == 32
