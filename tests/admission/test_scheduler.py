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
