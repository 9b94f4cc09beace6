"""The /graphql ASGI endpoint: body-size limit, bearer auth, request span, then Strawberry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cross_web import HTTPException
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send
from strawberry.asgi import GraphQL

from gateway.admission.asgi import replay
from gateway.errors import ErrorCode, GatewayError, LimitExceeded, Unauthenticated
from gateway.graphql.body import check_json_body, check_query_params
from gateway.graphql.context import Context, parent_loader
from gateway.responses import coded_response, error_response
from gateway.telemetry.spans import private_span


class StrawberryApp(GraphQL):
    """Strawberry's ASGI app with our typed context."""

    def __init__(self, schema: Any, state: Callable[[], Any]) -> None:
        super().__init__(schema, graphql_ide="graphiql", allow_queries_via_get=True)
        self._state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Strawberry answers transport mistakes in plain text; here they are coded GraphQL errors."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        try:
            response = await self.run(Request(scope=scope, receive=receive))
        except HTTPException as exc:
            response = coded_response(ErrorCode.INVALID_INPUT, _transport_message(exc), exc.status_code)
        await response(scope, receive, send)

    async def get_context(self, request: Any, response: Any = None) -> Context | None:  # type: ignore[override]
        principal = request.scope.get("state", {}).get("principal")
        if principal is None:
            return None  # only the GraphiQL page gets here unauthenticated, and it executes nothing
        state = self._state()
        return Context(principal=principal, searcher=state.searcher, writer=state.writer, tools=state.tools,
                       tracer=state.tracer,
                       parents=parent_loader(principal, state.searcher, state.store, state.tracer),
                       admin=state.admin, jobs=state.jobs)


class GraphQLEndpoint:
    """Authenticates every GraphQL request; the GraphiQL page itself is public."""

    def __init__(self, app: StrawberryApp, state: Callable[[], Any], max_body_bytes: int) -> None:
        self._app = app
        self._state = state
        self._max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await coded_response(ErrorCode.INVALID_INPUT, "only HTTP is served here", 400)(scope, receive, send)
            return
        request = Request(scope)
        if _is_ide_request(request):
            await self._app(scope, receive, send)
            return
        state = self._state()
        try:
            body = await _read_body(receive, self._max_body)
            principal = state.authenticator.authenticate(request.headers.get("authorization"))
            _check_request(request, body)
        except GatewayError as exc:
            await _error_response(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        with private_span(state.tracer, "graphql.request", kind=SpanKind.SERVER) as span:
            span.set_attribute("gateway.tenant", principal.tenant)
            span.set_attribute("gateway.role", principal.role.value)
            status: dict[str, int] = {}

            async def send_tracking(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status["code"] = message["status"]
                await send(message)

            await self._app(scope, replay(body), send_tracking)
            span.set_attribute("http.response.status_code", status.get("code", 0))
            if status.get("code", 200) >= 500:
                span.set_status(Status(StatusCode.ERROR))


def _is_ide_request(request: Request) -> bool:
    return (request.method == "GET" and "text/html" in request.headers.get("accept", "")
            and "query" not in request.query_params)


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise LimitExceeded(f"request body is over {limit} bytes; at most {limit} are accepted "
                                "(GATEWAY_MAX_BODY_BYTES)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _check_request(request: Request, body: bytes) -> None:
    """JSON bodies and GET query strings are checked here; other content types get Strawberry's answer."""
    if request.method == "GET":
        check_query_params(request.query_params)
    elif request.method == "POST" and "json" in request.headers.get("content-type", "").split(";")[0]:
        check_json_body(body)


def _transport_message(exc: HTTPException) -> str:
    reason = str(exc.reason)
    if reason == "Unsupported content type":
        return "unsupported Content-Type; send 'application/json' (POST) or a query string (GET)"
    return reason



def _error_response(exc: GatewayError) -> JSONResponse:
    status = {ErrorCode.UNAUTHENTICATED: 401, ErrorCode.LIMIT_EXCEEDED: 413}.get(exc.code, 400)
    headers = {"WWW-Authenticate": 'Bearer realm="gateway"'} if isinstance(exc, Unauthenticated) else None
    return error_response(exc, status, headers)
