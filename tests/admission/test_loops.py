import asyncio
import threading
from contextvars import ContextVar

import pytest

from gateway.admission.loops import TenantLoops, send_from

marker: ContextVar[str] = ContextVar("marker", default="unset")


async def test_each_tenant_runs_on_its_own_loop_thread_with_the_callers_context():
    loops = TenantLoops()

    async def where() -> tuple[str, str]:
        await asyncio.sleep(0)
        return threading.current_thread().name, marker.get()

    try:
        marker.set("request-7")
        acme, acme_again, globex = await asyncio.gather(loops.run("acme", where()), loops.run("acme", where()),
                                                        loops.run("globex", where()))
    finally:
        loops.shutdown()
    assert acme == acme_again == ("gateway-loop-acme", "request-7")
    assert globex == ("gateway-loop-globex", "request-7")


async def test_a_busy_tenant_loop_does_not_block_another_tenant():
    loops = TenantLoops()
    release = threading.Event()

    async def hog() -> None:
        release.wait(10)  # blocks acme's loop, as a long synchronous serialisation would

    async def quick() -> str:
        return "answered"

    try:
        hogging = asyncio.ensure_future(loops.run("acme", hog()))
        assert await asyncio.wait_for(loops.run("globex", quick()), 10) == "answered"
        release.set()
        await hogging
    finally:
        loops.shutdown()


async def test_cancelling_the_caller_cancels_the_coroutine_on_the_tenant_loop():
    loops = TenantLoops()
    started, cancelled = threading.Event(), threading.Event()

    async def slow() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    try:
        task = asyncio.ensure_future(loops.run("acme", slow()))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(cancelled.wait, 10)
    finally:
        loops.shutdown()


async def test_errors_come_back_and_sends_run_on_the_callers_loop():
    loops = TenantLoops()
    server_loop = asyncio.get_running_loop()
    seen: list[tuple[str, bool]] = []

    async def send(message: str) -> None:
        seen.append((message, asyncio.get_running_loop() is server_loop))

    async def app() -> None:
        await send_from(server_loop, send, "http.response.start")
        raise KeyError("from the tenant loop")

    try:
        with pytest.raises(KeyError, match="from the tenant loop"):
            await loops.run("acme", app())
    finally:
        loops.shutdown()
    assert seen == [("http.response.start", True)]
    with pytest.raises(RuntimeError, match="shut down"):
        await loops.run("acme", app())
