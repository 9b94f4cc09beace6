"""GraphQL-shaped JSON errors for failures outside execution: transport, authentication, admission.

`{"data": null, "errors": [{"message", "extensions": {"code"}}]}`, rendered as ASCII so that a
message quoting hostile text (a lone surrogate, say) can always be encoded.
"""

from __future__ import annotations

import json

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import Message, Send

from gateway.errors import ErrorCode, GatewayError


JSON = "application/json"
# Tenant data is behind a key: no shared cache may keep it, and a private one must not hand one
# key's answer to another request.
PRIVATE = "private, no-store"
# Where the /graphql endpoint records the media type it negotiated, for layers below it.
MEDIA_KEY = "gateway.media"


def media_of(scope: dict) -> str:
    return str(scope.get(MEDIA_KEY, JSON))


def coded_response(code: ErrorCode, message: str, status: int,
                   headers: dict[str, str] | None = None, media_type: str = JSON) -> JSONResponse:
    """`application/graphql-response+json` (any media type but JSON) leaves out `data`: the spec's
    request errors have none."""
    error = {"message": message, "extensions": {"code": code.value}}
    payload = {"data": None, "errors": [error]} if media_type == JSON else {"errors": [error]}
    return _AsciiJSON(payload, status_code=status, headers=headers, media_type=media_type)


def error_response(exc: GatewayError, status: int, headers: dict[str, str] | None = None,
                   media_type: str = JSON) -> JSONResponse:
    return coded_response(exc.code, exc.message, status, headers, media_type)


def add_vary(headers: MutableHeaders, *names: str) -> None:
    """Add names to a response's Vary header, once each, keeping what is there."""
    present = [part.strip() for part in headers.get("vary", "").split(",") if part.strip()]
    lowered = {part.lower() for part in present}
    for name in names:
        if name.lower() not in lowered:
            present.append(name)
            lowered.add(name.lower())
    headers["Vary"] = ", ".join(present)


def ascii_json(content: object) -> bytes:
    """Compact JSON with everything past ASCII escaped: any str encodes, a lone surrogate too."""
    return json.dumps(content, separators=(",", ":")).encode("ascii")


class _AsciiJSON(JSONResponse):
    def render(self, content: object) -> bytes:
        return ascii_json(content)


def uncacheable(send: Send, *vary: str) -> Send:
    """`send` with every response marked `Cache-Control: private, no-store`, varying on `vary`."""
    async def send_uncacheable(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            headers["Cache-Control"] = PRIVATE
            add_vary(headers, *vary)
        await send(message)

    return send_uncacheable
