"""CORS for browser apps served from another origin (docs/http.md).

Closed by default: the app installs this middleware only when GATEWAY_CORS_ORIGINS lists an
origin. A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered here,
before authentication, because browsers never send credentials on one. An allowed preflight is
204 with the allowed methods, headers and max-age; a refused one is a coded 403 that names the
origin, method or header and what is allowed (the browser then blocks the call). Every response
to a request with an Origin says `Vary: Origin`, so a cache never hands one origin's answer to
another.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import ErrorCode, allowed
from gateway.responses import add_vary, coded_response

# What a GraphQL client sends besides the CORS-safelisted headers: the bearer key, the JSON
# content type, and W3C trace context so a browser's trace continues into the gateway.
ALLOWED_HEADERS = ("authorization", "content-type", "traceparent", "tracestate")
# Response headers a browser script may read beyond the safelisted ones: when to retry a 429.
EXPOSED_HEADERS = ("Retry-After",)


class Cors:
    """Answers preflights and marks responses for the configured origins."""

    def __init__(self, app: ASGIApp, origins: Sequence[str], methods: Sequence[str], max_age_s: int) -> None:
        if not origins:
            raise ValueError("Cors needs at least one origin; leave the middleware out to keep CORS closed")
        self._app = app
        self._any = "*" in origins
        self._origins = frozenset(origins)
        self._methods = tuple(methods)
        self._max_age = str(max_age_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None:
            await self._app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(origin, headers)(scope, receive, send)
            return
        allowed_origin = self._allows(origin)

        async def send_marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                response_headers = MutableHeaders(scope=message)
                add_vary(response_headers, "Origin")
                if allowed_origin:
                    response_headers["Access-Control-Allow-Origin"] = "*" if self._any else origin
                    response_headers["Access-Control-Expose-Headers"] = ", ".join(EXPOSED_HEADERS)
            await send(message)

        await self._app(scope, receive, send_marked)

    def _preflight(self, origin: str, headers: Headers) -> Response:
        method = headers["access-control-request-method"].upper()
        requested = [h.strip().lower() for h in headers.get("access-control-request-headers", "").split(",")
                     if h.strip()]
        refused = [h for h in requested if h not in ALLOWED_HEADERS]
        problem = None
        if not self._allows(origin):
            problem = (f"origin {origin[:200]!r} is not allowed to call this gateway; allowed: "
                       f"{allowed(self._origins)} (GATEWAY_CORS_ORIGINS)")
        elif method not in self._methods:
            problem = f"method {method[:20]!r} is not allowed from a browser; allowed: {allowed(self._methods)}"
        elif refused:
            problem = (f"request header(s) {', '.join(refused)[:200]} are not allowed from a browser; allowed: "
                       f"{allowed(ALLOWED_HEADERS)}")
        vary = {"Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"}
        if problem is not None:
            return coded_response(ErrorCode.FORBIDDEN, problem, 403, headers=vary)
        return Response(status_code=204, headers={
            **vary,
            "Access-Control-Allow-Origin": "*" if self._any else origin,
            "Access-Control-Allow-Methods": ", ".join(self._methods),
            "Access-Control-Allow-Headers": ", ".join(ALLOWED_HEADERS),
            "Access-Control-Max-Age": self._max_age,
        })

    def _allows(self, origin: str) -> bool:
        return self._any or origin.lower() in self._origins
