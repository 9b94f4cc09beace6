import asyncio
import threading
import time
from contextvars import ContextVar

import pytest

from gateway.admission.deadline import Deadline, deadline_scope
from gateway.admission.scheduler import FairScheduler, Lane, current_tenant, lane_scope, offload
from gateway.errors import DeadlineExceeded


def wait_until(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def test_tenants_take_turns_instead_of_first_come_first_served():
    scheduler = FairScheduler(workers=1, max_running=10)
    gate = threading.Event()
    order: list[str] = []
    try:
        blocker = scheduler.submit("flooder", gate.wait)
        wait_until(lambda: scheduler.running("flooder") == 1)
        flood = [scheduler.submit("flooder", order.append, f"flooder-{i}") for i in range(6)]
        quiet = scheduler.submit("quiet", order.append, "quiet")
        gate.set()
        for future in [blocker, *flood, quiet]:
            future.result(timeout=10)
    finally:
        scheduler.shutdown()
    # The quiet tenant waited for one unit of the flooder's work, not for all six.
    assert order.index("quiet") <= 1, order


def test_one_tenant_holds_at_most_max_running_workers():
    scheduler = FairScheduler(workers=2, max_running=lambda tenant: 1)
    gate = threading.Event()
    try:
        held = [scheduler.submit("flooder", gate.wait) for _ in range(2)]
        wait_until(lambda: scheduler.running("flooder") == 1)
        assert scheduler.queued("flooder") == 1
        # The second worker is free for another tenant while the flooder's second job waits.
        assert scheduler.submit("quiet", lambda: "answered").result(timeout=10) == "answered"
        gate.set()
        for future in held:
            future.result(timeout=10)
    finally:
        scheduler.shutdown()


async def test_a_job_whose_caller_went_away_never_starts():
    scheduler = FairScheduler(workers=1)
    gate = threading.Event()
    ran: list[str] = []
    try:
        blocker = scheduler.submit("acme", gate.wait)
        task = asyncio.ensure_future(scheduler.run("acme", ran.append, "late"))
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)
        gate.set()
        blocker.result(timeout=10)
        assert scheduler.submit("acme", lambda: "next").result(timeout=10) == "next"
    finally:
        scheduler.shutdown()
    assert ran == []


async def test_a_job_past_its_request_deadline_is_not_started():
    scheduler = FairScheduler(workers=1)
    ran: list[str] = []
    deadline = Deadline(60)
    try:
        with deadline_scope(deadline), lane_scope(Lane(scheduler, "acme")):
            deadline.done("route")
            deadline.cancel()
            with pytest.raises(DeadlineExceeded, match="client disconnected; done: route"):
                await offload(ran.append, "work")
    finally:
        scheduler.shutdown()
    assert ran == []


async def test_offload_runs_on_the_lane_with_the_callers_context_and_errors():
    scheduler = FairScheduler(workers=2)
    marker: ContextVar[str] = ContextVar("marker", default="unset")

    def boom() -> None:
        raise KeyError("from the worker")

    try:
        marker.set("request-1")
        with lane_scope(Lane(scheduler, "acme")):
            seen = await offload(lambda: (current_tenant(), marker.get(), threading.current_thread().name))
            with pytest.raises(KeyError, match="from the worker"):
                await offload(boom)
    finally:
        scheduler.shutdown()
    assert seen[:2] == ("acme", "request-1") and seen[2].startswith("gateway-blocking-")


async def test_offload_without_a_lane_uses_the_default_executor():
    assert current_tenant() is None
    assert await offload(lambda x: x * 2, 21) == 42


def test_scheduler_refuses_work_after_shutdown_and_needs_a_worker():
    scheduler = FairScheduler(workers=1)
    scheduler.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        scheduler.submit("acme", print)
    with pytest.raises(ValueError, match="at least one worker"):
        FairScheduler(workers=0)
