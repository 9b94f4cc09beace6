"""The MCP endpoint (`/mcp`, streamable HTTP, stateless): the agent tools behind the same API keys.

Transport only: authentication with the gateway's authenticator, then the official SDK's
session manager, whose handlers call `Tools`. Stateless JSON responses, so any worker can answer
any request and nothing about a session lives in one process.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from gateway.errors import ErrorCode, GatewayError
from gateway.mcp.tools import Tools
from gateway.tenancy.auth import Principal

SERVER_NAME = "retrieval-gateway"
log = logging.getLogger("gateway.mcp")


class McpEndpoint:
    """ASGI app for `/mcp`: 401 without a valid key, else the SDK's transport with the principal attached."""

    def __init__(self, state: Callable[[], Any], max_body_bytes: int) -> None:
        self._state = state
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
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            principal = self._state().authenticator.authenticate(headers.get("authorization"))
        except GatewayError as exc:
            await _unauthenticated(exc, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self._manager.handle_request(scope, receive, send)

    def _tools(self) -> Tools:
        return self._state().tools

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=d.name, description=d.description,
                                                       input_schema=dict(d.parameters))
                                            for d in self._tools().definitions])

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        principal: Principal = ctx.request.scope["state"]["principal"]
        try:
            text, payload = await self._tools().call(principal, params.name, params.arguments)
        except GatewayError as exc:
            # Tool errors go back in the result, so the model can read the code and correct itself.
            return _error(exc.code, exc.message)
        except Exception as exc:  # masked like GraphQL's INTERNAL; the traceback goes to the log only
            log.error("unexpected error in tool %s tenant=%s type=%s", params.name, principal.tenant,
                      type(exc).__name__, exc_info=exc)
            return _error(ErrorCode.INTERNAL, "Unexpected error.")
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=payload)


def _error(code: ErrorCode, message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"{code.value}: {message}")],
                                structured_content={"error": {"code": code.value, "message": message}},
                                is_error=True)


async def _unauthenticated(exc: GatewayError, send: Send) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None,
                       "error": {"code": -32001, "message": exc.message,
                                 "data": {"code": ErrorCode.UNAUTHENTICATED.value}}}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="gateway"')]})
    await send({"type": "http.response.body", "body": body})
