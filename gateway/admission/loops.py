"""One event loop per tenant for GraphQL execution, each on its own thread.

Resolving and serialising a GraphQL answer is synchronous Python on the event loop: 100 hits
with every field take ~30 ms, 15 aliased searches ~700 ms, and no other request's callback
runs meanwhile. On one shared loop a flooding tenant's answers therefore delay every hop of
every other tenant's request, whatever the thread pools do. With a loop per tenant, a tenant
that keeps its loop busy delays only itself: the interpreter switches threads every 5 ms
(sys.getswitchinterval), so another tenant's loop waits milliseconds, not whole answers. The
server's own loop (uvicorn) only moves bytes and runs admission.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from gateway.admission.threads import name_native_thread

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (a dependency; uvicorn serves on it too): its cross-thread
    wake-ups, which every request makes several of, cost a fraction of asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class TenantLoops:
    """Lazily started loop threads, one per tenant; `run(tenant, coro)` awaits coro there."""

    def __init__(self) -> None:
        self._loops: dict[str, asyncio.AbstractEventLoop] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def _loop(self, tenant: str) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("tenant loops are shut down")
            loop = self._loops.get(tenant)
            if loop is None:
                loop = new_event_loop()
                thread = threading.Thread(target=_run_forever, args=(loop,), name=f"gateway-loop-{tenant}",
                                          daemon=True)
                thread.start()
                self._loops[tenant] = loop
                self._threads.append(thread)
            return loop

    async def run(self, tenant: str, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the tenant's loop in a copy of the caller's context (deadline, lane, span).

        Cancelling the awaiting task cancels the coroutine on the tenant's loop.
        """
        try:
            loop = self._loop(tenant)
        except RuntimeError:
            coro.close()
            raise
        context = contextvars.copy_context()
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        started: dict[str, asyncio.Task[T]] = {}

        def start() -> None:
            if result.cancelled():
                coro.close()
                return
            task = loop.create_task(coro, context=context)
            started["task"] = task
            task.add_done_callback(lambda done: _settle(done, result))

        def cancel_on_loop(future: concurrent.futures.Future[T]) -> None:
            if future.cancelled():
                loop.call_soon_threadsafe(lambda: started["task"].cancel() if "task" in started else None)

        result.add_done_callback(cancel_on_loop)
        loop.call_soon_threadsafe(start)
        return await asyncio.wrap_future(result)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            loops = list(self._loops.values())
        for loop in loops:
            loop.call_soon_threadsafe(loop.stop)
        for thread in self._threads:
            thread.join(timeout=30)
        for loop in loops:
            loop.close()


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    name_native_thread()
    loop.run_forever()


def _settle(task: asyncio.Task[T], result: concurrent.futures.Future[T]) -> None:
    if result.done():
        return
    if task.cancelled():
        result.cancel()
    elif task.exception() is not None:
        result.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        result.set_result(task.result())


async def send_from(loop: asyncio.AbstractEventLoop, send: Any, message: Any) -> None:
    """Hand an ASGI message back to the server's loop (sends must happen there)."""
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(send(message), loop))
