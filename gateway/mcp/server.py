"""The MCP endpoint (`/mcp`, streamable HTTP, stateless): the agent tools behind the same API keys.

Transport only: authentication with the gateway's authenticator, then the official SDK's
session manager, whose handlers call `Tools`. Stateless JSON responses, so any worker can answer
any request and nothing about a session lives in one process. A GET (a Server-Sent Events
stream) is held within its own budget and lifetime (gateway/mcp/streams.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from gateway.admission.asgi import HARD_GRACE_S, AdmissionRuntime
from gateway.admission.cost import SearchShape, TenantCostModel, filter_values
from gateway.admission.deadline import Deadline, deadline_scope
from gateway.tenancy.derived import PerTenant
from gateway.conversations.service import turn_cost
from gateway.retrieval.facets import DEFAULT_FACET_DEPTH, MAX_FACET_DEPTH
from gateway.admission.gate import retry_after
from gateway.errors import DeadlineExceeded, ErrorCode, Forbidden, GatewayError, RateLimited
from gateway.mcp.streams import OpenStreams, key_id
from gateway.mcp.tools import Tools
from gateway.responses import uncacheable
from gateway.telemetry.spans import private_span
from gateway.tenancy.auth import Principal

SERVER_NAME = "retrieval-gateway"
_TRACE_CONTEXT = TraceContextTextMapPropagator()
log = logging.getLogger("gateway.mcp")


class McpEndpoint:
    """ASGI app for `/mcp`: 401 without a valid key, else the SDK's transport with the principal attached."""

    def __init__(self, state: Callable[[], Any], max_body_bytes: int, streams: OpenStreams,
                 admission: Callable[[], AdmissionRuntime] | None = None) -> None:
        self._state = state
        self._admission = admission
        self.streams = streams
        self._costs = PerTenant(lambda tenant: self._state().runtime.registry.get(tenant), TenantCostModel)
        server = Server(SERVER_NAME, on_list_tools=self._list_tools, on_call_tool=self._call_tool,
                        instructions="Search this tenant's evidence, read sources, and check citations. "
                                     "Query-only: no tool writes or deletes.")
        self._manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True,
                                                     max_request_body_size=max_body_bytes)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self._manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        send = uncacheable(send, "Authorization")  # a tool's answer is the key's tenant's data
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            principal = self._state().authenticator.authenticate(headers.get("authorization"))
            if principal.platform:
                raise Forbidden("the platform key has no tools: /mcp serves a tenant's keys (the platform API is "
                                "on /graphql)")
        except GatewayError as exc:
            await _unauthenticated(exc, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        if scope.get("method") == "GET":
            await self._stream(scope, receive, send, key_id(headers.get("authorization", "")), principal.tenant)
            return
        await self._manager.handle_request(scope, receive, send)

    async def _stream(self, scope: Scope, receive: Receive, send: Send, key: str, tenant: str) -> None:
        """A GET stream within the stream budget, ended cleanly when its lifetime is up."""
        try:
            with self.streams.held(key, tenant):
                ending = _Ending(send)
                try:
                    async with asyncio.timeout(self.streams.limits.max_s):
                        await self._manager.handle_request(scope, receive, ending.send)
                except TimeoutError:
                    await ending.finish()
        except RateLimited as exc:
            await _refused(exc, send)

    def _tools(self) -> Tools:
        return self._state().tools

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        principal: Principal = ctx.request.scope["state"]["principal"]
        return types.ListToolsResult(tools=[types.Tool(name=d.name, description=d.description,
                                                       input_schema=dict(d.parameters))
                                            for d in self._tools().definitions_for(principal.tenant)])

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        principal: Principal = ctx.request.scope["state"]["principal"]
        # A server span per call, continuing the caller's traceparent, as /graphql opens one per
        # request: the search's trace (and so the result's traceId) hangs off it.
        caller = _TRACE_CONTEXT.extract(ctx.request.headers)
        try:
            with private_span(self._state().tracer, "mcp.tool", kind=SpanKind.SERVER, context=caller) as span:
                span.set_attribute("gateway.tenant", principal.tenant)
                span.set_attribute("gateway.tool", params.name)
                text, payload = await self._admitted(principal, params.name, dict(params.arguments or {}))
        except GatewayError as exc:  # a RateLimited message already says when to retry
            # Tool errors go back in the result, so the model can read the code and correct itself.
            return _error(exc.code, exc.message)
        except Exception as exc:  # masked like GraphQL's INTERNAL; the traceback goes to the log only
            log.error("unexpected error in tool %s tenant=%s type=%s", params.name, principal.tenant,
                      type(exc).__name__, exc_info=exc)
            return _error(ErrorCode.INTERNAL, "Unexpected error.")
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=payload)


    async def _admitted(self, principal: Principal, name: str, arguments: dict[str, Any]) -> tuple[str, dict]:
        """The tool call under the tenant's admission and deadline, on a request worker, as a GraphQL request is."""
        tools = self._tools()
        if self._admission is None:
            return await tools.call(principal, name, arguments)
        runtime, tenant = self._admission(), principal.tenant
        deadline = Deadline(runtime.admission.limits(tenant).deadline_s)
        cost = self._cost(tenant, name, arguments)
        async with runtime.admission.admit(tenant, cost):
            with deadline_scope(deadline):
                try:
                    return await asyncio.wait_for(runtime.execute(tenant, cost, tools.call(principal, name, arguments)),
                                                  deadline.remaining_s + HARD_GRACE_S)
                except TimeoutError:
                    deadline.cancel()
                    raise DeadlineExceeded(f"tool {name!r} ran past its deadline of {deadline.budget_s:g} s; "
                                           f"done: {', '.join(deadline.steps_done) or 'nothing'}") from None

    def _cost(self, tenant: str, name: str, arguments: dict[str, Any]) -> int:
        """The GraphQL cost model's figure for the same work (docs/operations.md)."""
        model = self._costs.get(tenant)
        base = self._tools().base_name(tenant, name)
        if base == "search":
            limit = arguments.get("limit")
            collections = arguments.get("collections")
            shape = SearchShape(limit=limit if isinstance(limit, int) else None,
                                collections=len(collections) if isinstance(collections, list) else None,
                                named_collection="collection" in arguments or name != base,
                                pipeline=arguments.get("pipeline") if isinstance(arguments.get("pipeline"), str)
                                else None, filter_values=filter_values(arguments.get("filter")),
                                facet_depth=_facet_depth(arguments),
                                highlighted=(1 << 30) if arguments.get("highlights") is True else 0)
            # As GraphQL prices it (graphql/cost.py): reading, writing and trimming the turns.
            turn = (turn_cost(self._state().runtime.registry.get(tenant).conversations)
                    if isinstance(arguments.get("conversationId"), str) else 0)
            return model.search(shape) + turn
        return model.source()


def _facet_depth(arguments: dict[str, Any]) -> int:
    """The hits a facet pass counts, as GraphQL prices it (graphql/cost.py)."""
    if not arguments.get("facets"):
        return 0
    depth = arguments.get("facetDepth")
    return min(depth if isinstance(depth, int) and depth > 0 else DEFAULT_FACET_DEPTH, MAX_FACET_DEPTH)


def _error(code: ErrorCode, message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"{code.value}: {message}")],
                                structured_content={"error": {"code": code.value, "message": message}},
                                is_error=True)


class _Ending:
    """The send of a stream, remembering whether the answer started and ended, so that a stream cut
    at its lifetime ends its body properly (the client sees the stream close, then may reconnect)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._started = self._ended = False

    async def send(self, message: Any) -> None:
        self._started = self._started or message["type"] == "http.response.start"
        self._ended = self._ended or (message["type"] == "http.response.body" and not message.get("more_body"))
        await self._send(message)

    async def finish(self) -> None:
        if self._started and not self._ended:
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})


async def _unauthenticated(exc: GatewayError, send: Send) -> None:
    """401 for a missing or unknown key; 403 for a key that may not use /mcp (platform, deactivated tenant)."""
    forbidden = exc.code is ErrorCode.FORBIDDEN
    await _json_rpc_error(send, 403 if forbidden else 401, -32001, exc, [(b"www-authenticate", b'Bearer realm="gateway"')],
                          code=exc.code if forbidden else ErrorCode.UNAUTHENTICATED)


async def _refused(exc: RateLimited, send: Send) -> None:
    await _json_rpc_error(send, 429, -32000, exc, [(b"retry-after", str(retry_after(exc.retry_after_s)).encode())])


async def _json_rpc_error(send: Send, status: int, rpc_code: int, exc: GatewayError,
                          headers: list[tuple[bytes, bytes]], code: ErrorCode | None = None) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": rpc_code, "message": exc.message, "data": {"code": (code or exc.code).value}}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})
