import asyncio
import threading
from contextvars import ContextVar

import pytest

from gateway.admission.deadline import Deadline, deadline_scope
from gateway.admission.scheduler import Lane, current_tenant, lane_scope, offload, spare_workers
from gateway.errors import DeadlineExceeded


async def test_on_its_worker_a_request_runs_blocking_work_inline_with_its_context_and_errors():
    marker: ContextVar[str] = ContextVar("marker", default="unset")

    def boom() -> None:
        raise KeyError("from the work")

    marker.set("request-1")
    with lane_scope(Lane("acme", threading.current_thread())):
        seen = await offload(lambda: (current_tenant(), marker.get(), threading.current_thread()))
        assert not spare_workers(2)  # the worker is the request's one thread: no splitting
        with pytest.raises(KeyError, match="from the work"):
            await offload(boom)
    assert seen == ("acme", "request-1", threading.current_thread())


async def test_off_its_worker_blocking_work_goes_to_the_default_executor():
    assert current_tenant() is None and spare_workers(2)
    assert await offload(lambda x: x * 2, 21) == 42
    other = threading.Thread(target=lambda: None)
    with lane_scope(Lane("acme", other)):
        ran_on = await offload(threading.current_thread)
        assert spare_workers(2)
    assert ran_on is not threading.current_thread() and ran_on is not other


@pytest.mark.parametrize("inline", [True, False])
async def test_blocking_work_past_its_request_deadline_is_not_started(inline: bool):
    ran: list[str] = []
    deadline = Deadline(60)
    thread = threading.current_thread() if inline else None
    with deadline_scope(deadline), lane_scope(Lane("acme", thread)):
        deadline.done("route")
        deadline.cancel()
        with pytest.raises(DeadlineExceeded, match="client disconnected; done: route"):
            await offload(ran.append, "work")
    assert ran == []
    await asyncio.sleep(0)


# -- a request's fan-out borrows idle request workers -------------------------------------------------

def _on_a_worker(workers, parts):
    """Run `parts()` as one request of tenant acme on a request worker, as AdmissionRuntime does."""
    from gateway.admission.asgi import _on_worker

    return workers.submit("acme", 1, _on_worker("acme", parts(), workers.lend)).result(timeout=30)


def test_a_fan_out_runs_its_parts_blocking_calls_side_by_side_on_idle_workers():
    from gateway.admission.scheduler import fan_out
    from gateway.admission.workers import LEND_RESERVE, RequestWorkers

    parts = 3
    workers = RequestWorkers(1 + LEND_RESERVE + parts)  # the request's own worker, the reserve, one per part
    together = threading.Barrier(parts, timeout=10)  # broken unless all parts block at once

    def blocking():
        together.wait()
        return threading.current_thread().name

    async def request():
        return await fan_out(*(offload(blocking) for _ in range(parts)))

    try:
        threads = _on_a_worker(workers, request)
    finally:
        workers.shutdown()
    assert len(set(threads)) == parts


def test_outside_a_fan_out_and_without_spare_workers_blocking_calls_stay_on_the_request_worker():
    from gateway.admission.scheduler import fan_out
    from gateway.admission.workers import LEND_RESERVE, RequestWorkers

    def where():
        return threading.current_thread().name

    async def gathered():
        return await asyncio.gather(*(offload(where) for _ in range(3)))

    async def fanned():
        return await fan_out(*(offload(where) for _ in range(3)))

    plenty, reserve_only = RequestWorkers(6), RequestWorkers(1 + LEND_RESERVE)
    try:
        assert len(set(_on_a_worker(plenty, gathered))) == 1  # not a fan-out: inline, one thread
        assert len(set(_on_a_worker(reserve_only, fanned))) == 1  # the reserve is never lent
    finally:
        plenty.shutdown()
        reserve_only.shutdown()


def test_a_borrowed_worker_leaves_the_reserve_to_another_tenants_request():
    from gateway.admission.scheduler import fan_out
    from gateway.admission.workers import RequestWorkers

    workers = RequestWorkers(3, max_running=2)
    release = threading.Event()
    started = threading.Semaphore(0)

    def held():
        started.release()
        release.wait(10)

    async def request():
        return await fan_out(*(offload(held) for _ in range(2)))

    try:
        flood = threading.Thread(target=_on_a_worker, args=(workers, request))
        flood.start()
        assert started.acquire(timeout=10) and started.acquire(timeout=10)  # one part lent, one inline
        assert workers.submit("quiet", 1, asyncio.sleep(0, "answered")).result(timeout=10) == "answered"
        assert workers.running("acme") == 1  # the borrowed worker is not counted against acme's cap
        release.set()
        flood.join(timeout=10)
    finally:
        release.set()
        workers.shutdown()
