import asyncio

import pytest

from gateway.admission.deadline import Deadline, check_deadline, current_deadline, deadline_scope, step_done
from gateway.errors import DeadlineExceeded


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_deadline_passes_until_spent_then_names_what_was_done():
    clock = Clock()
    deadline = Deadline(0.5, clock=clock)
    deadline.check("retrieval")
    deadline.done("route")
    deadline.done("retrieval (40 hits)")
    clock.now = 0.75
    with pytest.raises(DeadlineExceeded, match=r"deadline of 500 ms exceeded after 750 ms, before hit stage "
                                               r"'rerank'; done: route, retrieval \(40 hits\)"):
        deadline.check("hit stage 'rerank'")


def test_cancelled_deadline_says_the_client_went_away():
    deadline = Deadline(60)
    deadline.cancel()
    assert deadline.expired()
    with pytest.raises(DeadlineExceeded, match="client disconnected; done: nothing"):
        deadline.check("retrieval")


def test_check_deadline_is_a_no_op_outside_a_request():
    assert current_deadline() is None
    check_deadline("anything")
    step_done("anything")


def test_deadline_scope_reaches_worker_threads():
    clock = Clock()
    deadline = Deadline(1.0, clock=clock)

    async def main() -> None:
        with deadline_scope(deadline):
            step_done("route")
            clock.now = 2.0
            await asyncio.to_thread(check_deadline, "work in a thread")

    with pytest.raises(DeadlineExceeded, match="before work in a thread; done: route"):
        asyncio.run(main())
    assert current_deadline() is None


def test_deadline_needs_a_positive_budget():
    with pytest.raises(ValueError, match="positive budget"):
        Deadline(0)
