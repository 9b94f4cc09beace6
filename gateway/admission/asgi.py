"""The admission layer of /graphql: cost estimate, admission, deadline and fair lane per request.

It wraps the Strawberry app inside GraphQLEndpoint, so it runs after the body is read and the
caller authenticated (the principal is in `scope["state"]`). Admitted requests execute on a
request worker taken by fair queueing over their cost (gateway/admission/workers.py). Refusals are GraphQL-shaped JSON:
RATE_LIMITED is HTTP 429 with Retry-After, a request over the cost ceiling LIMIT_EXCEEDED (413),
and a request still running past its deadline plus a grace period DEADLINE_EXCEEDED (504).
Deadlines are normally met cooperatively, inside execution, as a GraphQL error that keeps
whatever other fields finished.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.admission.deadline import Deadline, deadline_scope
from gateway.admission.gate import Admission, retry_after
from gateway.admission.scheduler import Lane, lane_scope
from gateway.admission.workers import RequestWorkers
from gateway.errors import DeadlineExceeded, LimitExceeded, RateLimited
from gateway.responses import error_response, media_of

# How long past its deadline a request may run before it is cut off from outside: long enough
# for cooperative checks between stages to answer first, with what was done.
HARD_GRACE_S = 1.0
RECORD_KEY = "gateway.request"
T = TypeVar("T")


class Estimate(Protocol):
    operation: str
    name: str | None
    cost: int


# (tenant, method, body, query parameters) -> the request's estimate
Estimator = Callable[[str, str, bytes, Mapping[str, str]], Estimate]


@dataclass
class RequestRecord:
    """What the access log and metrics learn about one request as it passes through."""

    tenant: str | None = None
    operation: str = "-"
    name: str | None = None
    cost: int = 0
    code: str | None = None
    deadline: Deadline | None = None
    admitted: bool = False
    trace_id: str | None = None


@dataclass(frozen=True)
class AdmissionRuntime:
    admission: Admission
    workers: RequestWorkers
    estimate: Estimator

    async def execute(self, tenant: str, cost: int, coro: Coroutine[Any, Any, T]) -> T:
        """Run an admitted request's coroutine on a request worker, with its lane set there."""
        return await self.workers.run(tenant, cost, _on_worker(tenant, coro, self.workers.lend))


async def _on_worker(tenant: str, coro: Coroutine[Any, Any, T], lend: Callable[..., Any]) -> T:
    with lane_scope(Lane(tenant, threading.current_thread(), lend)):
        return await coro


class AdmissionApp:
    """Admits each authenticated GraphQL request for its tenant, then runs it on a request worker."""

    def __init__(self, app: ASGIApp, runtime: Callable[[], AdmissionRuntime]) -> None:
        self._app = app
        self._runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = scope.get("state", {}).get("principal")
        if scope["type"] != "http" or principal is None:
            await self._app(scope, receive, send)  # the GraphiQL page: executes nothing
            return
        runtime = self._runtime()
        tenant = principal.tenant
        body = await _read_replayed(receive)
        request = Request(scope)
        estimate = runtime.estimate(tenant, request.method, body, request.query_params)
        record: RequestRecord = scope.setdefault(RECORD_KEY, RequestRecord())
        record.tenant, record.operation, record.name, record.cost = tenant, estimate.operation, estimate.name, estimate.cost
        limits = runtime.admission.limits(tenant)
        deadline = Deadline(limits.deadline_s)
        record.deadline = deadline
        response = _HeldResponse(send, asyncio.get_running_loop(), streaming=streams(scope))
        try:
            async with runtime.admission.admit(tenant, estimate.cost):
                record.admitted = True
                with deadline_scope(deadline):
                    execution = runtime.execute(tenant, estimate.cost,
                                                self._app(scope, replay(body, hold=streams(scope)), response.send))
                    await asyncio.wait_for(execution, max(0.0, deadline.remaining_s) + HARD_GRACE_S)
                await response.release()
        except RateLimited as exc:
            await error_response(exc, 429, {"Retry-After": str(retry_after(exc.retry_after_s))},
                                 media_of(scope))(scope, receive, send)
        except LimitExceeded as exc:
            await error_response(exc, 413, media_type=media_of(scope))(scope, receive, send)
        except TimeoutError:
            if response.started:
                return
            deadline.cancel()  # whatever is still queued for this request is dropped
            done = ", ".join(deadline.steps_done) or "nothing"
            exc = DeadlineExceeded(f"deadline of {limits.deadline_s * 1000:.0f} ms exceeded; the request was "
                                   f"stopped after {deadline.elapsed_s * 1000:.0f} ms; done: {done}")
            await error_response(exc, 504, media_type=media_of(scope))(scope, receive, send)


class _HeldResponse:
    """The ASGI send of a request executing on a request worker.

    A whole answer (one body message) is held on the worker and sent from the server's
    loop once execution ends: two hand-offs between threads fewer per request than sending each
    message across as it comes, which under load cost more CPU than the sends themselves. A
    streamed answer (a subscription, or any body sent in parts) goes across message by message,
    so its first event is not held back.
    """

    def __init__(self, send: Send, server_loop: asyncio.AbstractEventLoop, *, streaming: bool) -> None:
        self._send = send
        self._server_loop = server_loop
        self._streaming = streaming
        self._held: list[Message] = []
        self.started = False  # whether the client has seen the response start

    async def send(self, message: Message) -> None:
        """Called on the worker's loop."""
        if not self._streaming and message["type"] == "http.response.body" and message.get("more_body", False):
            self._streaming = True  # a body in parts: what was held goes first, then each part
        if not self._streaming:
            self._held.append(message)
            return
        held, self._held = self._held, []
        for each in (*held, message):
            self.started = self.started or each["type"] == "http.response.start"
            await send_from(self._server_loop, self._send, each)

    async def release(self) -> None:
        """Called on the server's loop once execution has ended."""
        held, self._held = self._held, []
        for message in held:
            self.started = self.started or message["type"] == "http.response.start"
            await self._send(message)


async def send_from(loop: asyncio.AbstractEventLoop, send: Any, message: Any) -> None:
    """Hand an ASGI message back to the server's loop (sends must happen there)."""
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(send(message), loop))


async def _read_replayed(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay(body: bytes, hold: bool = False) -> Receive:
    """A receive channel that yields an already-read body once, then a disconnect; with `hold`,
    it waits instead (a streaming response stops at the first disconnect it reads)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if hold:
            await asyncio.Event().wait()  # cancelled when the response is done
        # The access-log layer watches the real connection for a disconnect.
        return {"type": "http.disconnect"}

    return receive


def streams(scope: Scope) -> bool:
    """Whether the client asked for a streamed answer (a subscription over SSE or multipart)."""
    accept = next((value for name, value in scope.get("headers", ()) if name == b"accept"), b"").lower()
    return b"text/event-stream" in accept or b"subscriptionspec" in accept
