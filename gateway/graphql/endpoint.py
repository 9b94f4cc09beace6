"""The /graphql ASGI endpoint: HTTP conventions, body limit, bearer auth, persisted queries,
request span, then Strawberry.

docs/http.md describes what a client sees: media types and status codes, caching headers,
persisted queries, CORS (gateway/cors.py) and trace context.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import orjson

from cross_web import HTTPException
from graphql import ExecutionResult, GraphQLError, OperationDefinitionNode
from opentelemetry.propagators.textmap import DefaultGetter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.asgi import GraphQL
from strawberry.subscriptions import GRAPHQL_SSE_PROTOCOL, MULTIPART_SUBSCRIPTION_PROTOCOL

from gateway.admission.asgi import RECORD_KEY, replay, streams
from gateway.errors import ErrorCode, Forbidden, GatewayError, LimitExceeded, Unauthenticated, UnsupportedMediaType
from gateway.graphql.body import JSON_MEDIA_TYPE, check_content_type, check_request, parse_json_body, parse_query_params
from gateway.graphql.context import Context, parent_loader
from gateway.graphql.documents import DocumentCache
from gateway.graphql.ide import graphiql_page
from gateway.graphql.media import Media, negotiate
from gateway.graphql.persisted import PersistedQueries
from gateway.graphql.platform import PLATFORM_FIELDS, refused_fields
from gateway.responses import MEDIA_KEY, ascii_json, coded_response, error_response, uncacheable
from gateway.telemetry.spans import private_span
from gateway.tenancy.auth import PLATFORM

# An answer depends on the key and on the negotiated media type (gateway/responses.py: PRIVATE).
VARY = ("Authorization", "Accept")
ALLOW = "GET, POST, OPTIONS"
_SUB_RESPONSE = "gateway.sub_response"
# W3C trace context only: a caller's `traceparent` continues its trace (baggage is not read).
_TRACE_CONTEXT = TraceContextTextMapPropagator()


class StrawberryApp(GraphQL):
    """Strawberry's ASGI app with our typed context, our GraphiQL page and the spec's media types."""

    def __init__(self, schema: Any, state: Callable[[], Any]) -> None:
        # Subscriptions (searchProgress) stream over HTTP only: Server-Sent Events or multipart.
        super().__init__(schema, graphql_ide="graphiql", allow_queries_via_get=True,
                         subscription_protocols=(GRAPHQL_SSE_PROTOCOL, MULTIPART_SUBSCRIPTION_PROTOCOL))
        self._state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Strawberry answers transport mistakes in plain text; here they are coded GraphQL errors."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        try:
            response = await self.run(Request(scope=scope, receive=receive))
        except HTTPException as exc:
            response = coded_response(ErrorCode.INVALID_INPUT, _transport_message(exc), exc.status_code,
                                      media_type=scope.get(MEDIA_KEY, Media.JSON).value)
        await response(scope, receive, send)

    def encode_json(self, data: object) -> bytes:
        """orjson: a page of hits with provenance took json a tenth of the request's Python. What it
        refuses (a lone surrogate quoted from hostile input, an integer past 64 bits) goes through
        json, escaped to ASCII, as before."""
        try:
            return orjson.dumps(data)
        except orjson.JSONEncodeError:
            return ascii_json(data)

    async def render_graphql_ide(self, request: Request) -> Response:  # type: ignore[override]
        return graphiql_page(request)

    async def get_context(self, request: Any, response: Any = None) -> Context | None:  # type: ignore[override]
        principal = request.scope.get("state", {}).get("principal")
        if principal is None:
            return None  # only the GraphiQL page gets here unauthenticated, and it executes nothing
        state = self._state()
        return Context(principal=principal, searcher=state.searcher, writer=state.writer, tools=state.tools,
                       tracer=state.tracer,
                       parents=parent_loader(principal, state.searcher, state.store, state.tracer),
                       admin=state.admin, jobs=state.jobs, platform=state.platform)

    async def get_sub_response(self, request: Any) -> Response:
        sub_response = await super().get_sub_response(request)
        request.scope[_SUB_RESPONSE] = sub_response
        return sub_response

    async def process_result(self, request: Any, result: ExecutionResult) -> Any:  # type: ignore[override]
        """A request error (no path: parse, validation, variables) under graphql-response+json is
        HTTP 400 without `data`, as the GraphQL-over-HTTP spec has it; field errors stay 200."""
        payload = await super().process_result(request, result)
        if (request.scope.get(MEDIA_KEY) is Media.GRAPHQL_RESPONSE and result.data is None and result.errors
                and all(error.path is None for error in result.errors)):
            payload.pop("data", None)
            request.scope[_SUB_RESPONSE].status_code = 400
        return payload


class GraphQLEndpoint:
    """Authenticates every GraphQL request; the GraphiQL page itself is public."""

    def __init__(self, app: StrawberryApp, state: Callable[[], Any], max_body_bytes: int,
                 documents: DocumentCache, *, platform_app: ASGIApp | None = None) -> None:
        self._app = app
        # The platform operator's requests: no tenant's admission, lanes or cost model (rare, operator-only).
        self._platform_app = platform_app
        self._state = state
        self._max_body = max_body_bytes
        self._documents = documents

    def _subscribes(self, data: dict[str, Any] | None, tenant: str) -> bool:
        """Whether the request is a subscription (parsed once, in the tenant's document cache)."""
        if not data or not isinstance(data.get("query"), str):
            return False
        try:
            document = self._documents.parse(data["query"], tenant=tenant)
        except (GraphQLError, RecursionError):
            return False  # Strawberry answers the syntax error
        return _operation_type(document, data.get("operationName")) == "subscription"

    def _check_platform(self, data: dict[str, Any] | None) -> None:
        """The platform key selects platform fields only: it reads and writes no tenant's data."""
        if not data or not isinstance(data.get("query"), str):
            return  # Strawberry answers a request without a document
        try:
            document = self._documents.parse(data["query"], tenant=PLATFORM)
        except (GraphQLError, RecursionError):
            return  # Strawberry answers the syntax error
        refused = refused_fields(document, data.get("operationName"))
        if refused:
            raise Forbidden(f"the platform key may not select {', '.join(refused)}: those are tenant operations; "
                            f"allowed fields: {', '.join(sorted(PLATFORM_FIELDS))}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await coded_response(ErrorCode.INVALID_INPUT, "only HTTP is served here", 400)(scope, receive, send)
            return
        request = Request(scope)
        if request.method == "OPTIONS":
            # A preflight never carries the key; CORS (when configured) has answered it already.
            await Response(status_code=204, headers={"Allow": ALLOW})(scope, receive, send)
            return
        if _is_ide_request(request):
            await self._app(scope, receive, send)
            return
        media = negotiate(request.headers.get("accept"))
        scope[MEDIA_KEY] = media
        send = _cache_policy(send, media)
        state = self._state()
        try:
            body = await _read_body(receive, self._max_body)
            principal = state.authenticator.authenticate(request.headers.get("authorization"))
            body, data = _prepare(request, body, principal.tenant, state.persisted)
            if principal.platform:
                self._check_platform(data)
        except GatewayError as exc:
            await _error_response(exc, media)(scope, receive, send)
            return
        if streams(scope) and not self._subscribes(data, principal.tenant):
            # Clients such as urql list text/event-stream and multipart/mixed in every Accept;
            # Strawberry would then stream a query too. Only a subscription is streamed.
            _without_stream_types(scope)
        scope.setdefault("state", {})["principal"] = principal
        caller = _TRACE_CONTEXT.extract(request.headers, getter=_HEADERS)
        with private_span(state.tracer, "graphql.request", kind=SpanKind.SERVER, context=caller) as span:
            span.set_attribute("gateway.tenant", principal.tenant)
            if RECORD_KEY in scope:  # for the access line
                scope[RECORD_KEY].trace_id = format(span.get_span_context().trace_id, "032x")
            span.set_attribute("gateway.role", principal.role.value)
            status: dict[str, int | bool] = {}

            async def send_tracking(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status["code"] = message["status"]
                    status["sse"] = any(name.lower() == b"content-type" and value.startswith(b"text/event-stream")
                                        for name, value in message.get("headers", ()))
                elif message["type"] == "http.response.body" and status.get("sse"):
                    # Strawberry ends SSE lines with CRLF; urql's parser splits events on LF LF only.
                    # LF is valid SSE for every parser, and event data is one JSON line (no CR in it).
                    message = {**message, "body": message.get("body", b"").replace(b"\r\n", b"\n")}
                await send(message)

            app = self._platform_app if principal.platform and self._platform_app is not None else self._app
            await app(scope, replay(body), send_tracking)
            span.set_attribute("http.response.status_code", status.get("code", 0))
            if status.get("code", 200) >= 500:
                span.set_status(Status(StatusCode.ERROR))


class _HeaderGetter(DefaultGetter):
    """Starlette's headers are a case-insensitive mapping with one value per name."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if value is not None else None


_HEADERS = _HeaderGetter()


def _is_ide_request(request: Request) -> bool:
    return (request.method == "GET" and "text/html" in request.headers.get("accept", "")
            and "query" not in request.query_params and "extensions" not in request.query_params)


def _operation_type(document: Any, name: Any) -> str | None:
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)
                  and (not isinstance(name, str) or not name or (d.name is not None and d.name.value == name))]
    return operations[0].operation.value if len(operations) == 1 else None


def _prepare(request: Request, body: bytes, tenant: str,
             persisted: PersistedQueries) -> tuple[bytes, dict[str, Any] | None]:
    """Check the request, after filling in a persisted query's text; returns the body to execute
    and the request's {query, variables, operationName} (None for a body Strawberry answers).

    JSON bodies and GET query strings are checked here. A POST is JSON when check_content_type
    says so, and is then handed on as plain `application/json`, so Strawberry (which looks for
    the text anywhere in the mime type) reads exactly the bodies checked here; any other POST is
    415. Other methods get Strawberry's 405.
    """
    data = None
    if request.method == "GET":
        data = parse_query_params(request.query_params)
        if persisted.resolve(tenant, data):
            params = [(k, v) for k, v in request.query_params.multi_items() if k != "query"]
            request.scope["query_string"] = urlencode([*params, ("query", data["query"])]).encode("ascii")
        check_request(data)
    elif request.method == "POST":
        check_content_type(request.headers.get("content-type"))
        MutableHeaders(scope=request.scope)["content-type"] = JSON_MEDIA_TYPE
        data = parse_json_body(body)
        if persisted.resolve(tenant, data):
            body = json.dumps(data).encode()
        check_request(data)
    return body, data


def _without_stream_types(scope: Scope) -> None:
    """Accept without the streaming types (the rest of the negotiation is unchanged)."""
    headers = MutableHeaders(scope=scope)
    kept = [part for part in headers.get("accept", "").split(",")
            if not part.strip().lower().startswith(("text/event-stream", "multipart/mixed"))]
    headers["accept"] = ",".join(kept) or Media.JSON.value


def _cache_policy(send: Send, media: Media) -> Send:
    private = uncacheable(send, *VARY)

    async def send_with_policy(message: Message) -> None:
        if message["type"] == "http.response.start" and media is Media.GRAPHQL_RESPONSE:
            headers = MutableHeaders(scope=message)
            if headers.get("content-type", "").startswith(Media.JSON.value):
                headers["content-type"] = f"{media.value}; charset=utf-8"
        await private(message)

    return send_with_policy


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


def _transport_message(exc: HTTPException) -> str:
    reason = str(exc.reason)
    if reason.startswith("subscriptions are not allowed"):
        return ("a subscription (searchProgress) streams its answer: send Accept: text/event-stream or "
                "multipart/mixed;subscriptionSpec=1.0")
    return reason


def _error_response(exc: GatewayError, media: Media) -> JSONResponse:
    status = 415 if isinstance(exc, UnsupportedMediaType) else _STATUS.get(exc.code, 400)
    if exc.code in _PERSISTED_MISSES and media is Media.JSON:
        status = 200  # legacy JSON: a well-formed request is 200; Apollo's link reads either
    headers = {"WWW-Authenticate": 'Bearer realm="gateway"'} if isinstance(exc, Unauthenticated) else None
    return error_response(exc, status, headers, media.value)


_STATUS = {ErrorCode.UNAUTHENTICATED: 401, ErrorCode.FORBIDDEN: 403, ErrorCode.LIMIT_EXCEEDED: 413, ErrorCode.OPERATION_NOT_ALLOWED: 403}
_PERSISTED_MISSES = frozenset({ErrorCode.PERSISTED_QUERY_NOT_FOUND, ErrorCode.PERSISTED_QUERY_NOT_SUPPORTED})
