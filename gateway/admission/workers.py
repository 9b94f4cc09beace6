"""A fixed set of request workers, shared by every tenant and handed out by fair queueing.

Each worker is one thread with its own event loop and runs one admitted request at a time,
wholly: GraphQL execution, the request's blocking calls (embedding, Milvus, CPU stages; see
`offload` in gateway/admission/scheduler.py, which runs them inline on the worker) and the
serialising of its answer. So a request crosses threads twice (server loop to worker, worker
back with its answer) whatever it does, and a tenant's cost is a queue entry, never a thread.

Which request a freed worker takes next is start-time fair queueing over admitted cost: each
tenant's requests queue in arrival order; a request's start tag is the later of the queue's
virtual time and the finish tag of its tenant's previous request, and its finish tag adds its
cost. The worker takes the smallest start tag among tenants under their running cap. A tenant
that floods with costly requests thus waits behind its own backlog, while a tenant with one
cheap request waits for at most one freed worker. Queues and tags exist only while a tenant
has work queued or running: an idle tenant costs nothing here.

A request whose own parts are independent (a pipeline's planned queries, a federated search's
collections: `fan_out` in gateway/admission/scheduler.py) may borrow idle workers for their
blocking calls (`lend`), so that its four queries take about as long as one. Only workers no
queued request wants are lent (a request is handed to an idle worker the moment it arrives), and
LEND_RESERVE of them are always kept back, so a borrowed worker delays no other tenant's request
by more than one blocking call. The borrowed work counts against the request's admitted cost,
not against its tenant's running cap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import heapq
import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gateway.admission.threads import name_native_thread

T = TypeVar("T")
# Idle workers never lent to a request's fan-out: a request that arrives finds one at once.
LEND_RESERVE = 1


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (a dependency; uvicorn serves on it too): its cross-thread
    wake-ups, two per request, cost a fraction of asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def default_workers(cpus: int | None = None) -> int:
    """Four workers per core, at least eight. A request spends much of its time in calls that
    release the GIL (onnxruntime, the store's gRPC, waiting for the store's process), and a
    machine is rarely the gateway's alone: the kernel shares a busy core between runnable threads,
    so with two workers per core and two CPU-bound processes beside it, the gateway served 0.67x
    the queries a second of the same work done by 8 plain threads, and 0.85x with four per core
    (benchmarks/throughput.py --background 2, docs/benchmarks.md). A tenant still holds at most
    GATEWAY_TENANT_MAX_RUNNING of them, so more workers do not let one tenant take more."""
    return max(8, 4 * (cpus or os.cpu_count() or 1))


@dataclass(slots=True)
class _Request:
    tenant: str
    start: float   # virtual start tag (module docstring)
    coro: Coroutine[Any, Any, Any]
    context: contextvars.Context
    result: concurrent.futures.Future
    lent: bool = False  # a blocking call of a request running on another worker (`lend`)


@dataclass(slots=True)
class _Tenant:
    queue: deque[_Request] = field(default_factory=deque)
    running: int = 0
    finish: float = 0.0     # finish tag of the tenant's newest request
    in_heap: bool = False


class RequestWorkers:
    """`await workers.run(tenant, cost, coro)` runs coro on a worker when fair queueing reaches it.

    `max_running(tenant)` caps the workers one tenant holds at once; its other requests wait in
    its queue while other tenants' requests run. Cancelling the awaiting task drops a request
    still queued, and cancels one running on its worker.
    """

    def __init__(self, workers: int, max_running: Callable[[str], int] | int = 2,
                 on_queue_change: Callable[[str, int], None] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"request workers need at least one worker, got {workers}")
        self.workers = workers
        self._max_running = max_running if callable(max_running) else (lambda tenant, n=max_running: n)
        self._on_queue_change = on_queue_change or (lambda tenant, queued: None)
        self._lock = threading.Lock()
        self._tenants: dict[str, _Tenant] = {}  # only tenants with requests queued or running
        self._heap: list[tuple[float, int, str]] = []  # (head's start tag, order, tenant) of eligible tenants
        self._order = itertools.count()
        self._vtime = 0.0
        self._idle: list[_Worker] = []
        self._closed = False
        self._pool = [_Worker(self, i) for i in range(workers)]
        for worker in self._pool:
            worker.start()
        for worker in self._pool:  # every worker idle and lendable before the first request
            worker.ready.wait()

    @property
    def threads(self) -> list[threading.Thread]:
        return [worker.thread for worker in self._pool]

    def running(self, tenant: str) -> int:
        with self._lock:
            state = self._tenants.get(tenant)
            return state.running if state else 0

    def queued(self, tenant: str) -> int:
        with self._lock:
            state = self._tenants.get(tenant)
            return len(state.queue) if state else 0

    def tenants_held(self) -> int:
        """Tenants with any request queued or running (everything else holds no state here)."""
        with self._lock:
            return len(self._tenants)

    def submit(self, tenant: str, cost: int, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future:
        """Queue coro for `tenant`, to run in a copy of the caller's context (deadline, lane, span)."""
        result: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                coro.close()
                raise RuntimeError("request workers are shut down")
            state = self._tenants.get(tenant)
            if state is None:
                state = self._tenants[tenant] = _Tenant()
            start = max(self._vtime, state.finish)
            state.finish = start + max(1, cost)
            state.queue.append(_Request(tenant, start, coro, contextvars.copy_context(), result))
            queued = len(state.queue)
            self._make_eligible(tenant, state)
            handed = self._hand_out()
        self._on_queue_change(tenant, queued)
        for worker, request in handed:
            worker.give(request)
        return result

    async def run(self, tenant: str, cost: int, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(self.submit(tenant, cost, coro))

    def lend(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future | None:
        """Run blocking `fn(*args)` on an idle worker, in a copy of the caller's context; None when no
        worker beyond LEND_RESERVE is idle (the caller then runs it itself)."""
        with self._lock:
            if self._closed or len(self._idle) <= LEND_RESERVE:
                return None
            worker = self._idle.pop()
        result: concurrent.futures.Future = concurrent.futures.Future()
        worker.give(_Request("", 0.0, _call(fn, args), contextvars.copy_context(), result, lent=True))
        return result

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop taking requests; drop those still queued, let running ones end, stop the threads."""
        with self._lock:
            self._closed = True
            dropped = [request for state in self._tenants.values() for request in state.queue]
            for state in self._tenants.values():
                state.queue.clear()
            idle, self._idle = self._idle, []
        for request in dropped:
            request.coro.close()
            request.result.cancel()
        for worker in idle:
            worker.give(None)
        for worker in self._pool:
            worker.stop_when_done()
        for worker in self._pool:
            worker.thread.join(timeout=timeout_s)

    # Called with the lock held.

    def _make_eligible(self, tenant: str, state: _Tenant) -> None:
        if state.in_heap or not state.queue or state.running >= self._max_running(tenant):
            return
        heapq.heappush(self._heap, (state.queue[0].start, next(self._order), tenant))
        state.in_heap = True

    def _next(self) -> _Request | None:
        while self._heap:
            _, _, tenant = heapq.heappop(self._heap)
            state = self._tenants[tenant]
            state.in_heap = False
            while state.queue and state.queue[0].result.cancelled():  # its caller went away
                state.queue.popleft().coro.close()
            if not state.queue:
                self._forget_if_idle(tenant, state)
                continue
            request = state.queue.popleft()
            state.running += 1
            self._vtime = max(self._vtime, request.start)
            self._make_eligible(tenant, state)
            return request
        return None

    def _hand_out(self) -> list[tuple[_Worker, _Request]]:
        handed = []
        while self._idle:
            request = self._next()
            if request is None:
                break
            handed.append((self._idle.pop(), request))
        return handed

    def _forget_if_idle(self, tenant: str, state: _Tenant) -> None:
        if not state.queue and not state.running:
            del self._tenants[tenant]

    # Called by workers.

    def _done(self, worker: _Worker, request: _Request | None) -> _Request | None:
        """The worker finished `request` (or starts): its next request, or None to wait for one."""
        with self._lock:
            if request is not None and not request.lent:
                state = self._tenants[request.tenant]
                state.running -= 1
                self._make_eligible(request.tenant, state)
                self._forget_if_idle(request.tenant, state)
            if self._closed:
                return None
            following = self._next()
            if following is None:
                self._idle.append(worker)
                queued = None
            else:
                queued = len(self._tenants[following.tenant].queue)
        if following is not None:
            self._on_queue_change(following.tenant, queued or 0)
        return following


class _Worker:
    """One thread, one event loop, one request at a time."""

    def __init__(self, owner: RequestWorkers, index: int) -> None:
        self._owner = owner
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self._run_forever, name=f"gateway-worker-{index}", daemon=True)
        self._wake: asyncio.Future[_Request | None] | None = None
        self._stopping = False
        self.ready = threading.Event()  # set once the worker has taken its place among the idle

    def start(self) -> None:
        self.thread.start()

    def give(self, request: _Request | None) -> None:
        """Hand this idle worker a request (None: stop). Called from any thread."""
        self.loop.call_soon_threadsafe(self._woken, request)

    def stop_when_done(self) -> None:
        self.loop.call_soon_threadsafe(self._stop)

    def _woken(self, request: _Request | None) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(request)

    def _stop(self) -> None:
        self._stopping = True
        self._woken(None)

    def _run_forever(self) -> None:
        name_native_thread()
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self.ready.set()  # a worker that failed to start must not hold up the pool's constructor
            self.loop.close()

    async def _serve(self) -> None:
        request = self._owner._done(self, None)
        self.ready.set()
        while not self._stopping:
            if request is None:
                self._wake = self.loop.create_future()
                request = await self._wake
                self._wake = None
                if request is None:
                    continue
            await self._execute(request)
            request = self._owner._done(self, request)
        # Background work a request left on this loop (a hook delivery, a closing stream) gets its
        # last turn before the loop closes.
        pending = [task for task in asyncio.all_tasks(self.loop) if task is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending, timeout=5)

    async def _execute(self, request: _Request) -> None:
        result = request.result
        if result.cancelled():
            request.coro.close()  # its caller went away just before it started
            return
        task = self.loop.create_task(request.coro, context=request.context)
        # The future stays pending while the request runs, so that the caller can still cancel it.
        result.add_done_callback(lambda future: self.loop.call_soon_threadsafe(task.cancel)
                                 if future.cancelled() else None)
        try:
            value = await task
        except asyncio.CancelledError:
            _settle(result.cancel)
        except BaseException as exc:  # handed to the awaiting caller, which re-raises it
            _settle(result.set_exception, exc)
        else:
            _settle(result.set_result, value)


async def _call(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    return fn(*args)


def _settle(how: Callable[..., Any], *value: Any) -> None:
    try:
        how(*value)
    except concurrent.futures.InvalidStateError:
        pass  # the caller cancelled it meanwhile
