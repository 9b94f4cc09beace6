"""Job slots go round-robin between tenants: a tenant's next job waits for one of each other tenant."""

import asyncio

import pytest

from gateway.jobs.slots import FairSlots


async def _order(slots: FairSlots, arrivals: list[str]) -> list[str]:
    """Tenants in the order their jobs got a slot; each job holds it until the next test step."""
    started: list[str] = []

    async def job(tenant: str) -> None:
        await slots.acquire(tenant)
        started.append(tenant)

    tasks = []
    for tenant in arrivals:
        tasks.append(asyncio.create_task(job(tenant)))
        await asyncio.sleep(0)  # arrivals in this order
    for _ in arrivals:
        await asyncio.sleep(0.01)
        slots.release()
    await asyncio.gather(*tasks)
    return started


async def test_a_tenant_s_second_job_waits_for_the_other_tenants_first():
    assert await _order(FairSlots(1), ["a", "a", "a", "b", "c", "b"]) == ["a", "b", "c", "a", "b", "a"]


async def test_slots_are_shared_up_to_their_size():
    slots = FairSlots(2)
    await slots.acquire("a")
    await slots.acquire("a")
    third = asyncio.create_task(slots.acquire("b"))
    await asyncio.sleep(0.01)
    assert not third.done() and slots.waiting == 1
    slots.release()
    await asyncio.wait_for(third, 1)
    assert slots.waiting == 0


async def test_a_cancelled_wait_gives_up_its_place_and_no_slot_is_lost():
    slots = FairSlots(1)
    await slots.acquire("a")
    cancelled = asyncio.create_task(slots.acquire("a"))
    waiting = asyncio.create_task(slots.acquire("b"))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert slots.waiting == 1
    slots.release()
    await asyncio.wait_for(waiting, 1)
    slots.release()
    await asyncio.wait_for(slots.acquire("c"), 1)  # the slot is free again
