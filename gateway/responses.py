"""GraphQL-shaped JSON errors for failures outside execution: transport, authentication, admission.

`{"data": null, "errors": [{"message", "extensions": {"code"}}]}`, rendered as ASCII so that a
message quoting hostile text (a lone surrogate, say) can always be encoded.
"""

from __future__ import annotations

import json

from starlette.responses import JSONResponse

from gateway.errors import ErrorCode, GatewayError


def coded_response(code: ErrorCode, message: str, status: int,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    payload = {"data": None, "errors": [{"message": message, "extensions": {"code": code.value}}]}
    return _AsciiJSON(payload, status_code=status, headers=headers)


def error_response(exc: GatewayError, status: int, headers: dict[str, str] | None = None) -> JSONResponse:
    return coded_response(exc.code, exc.message, status, headers)


class _AsciiJSON(JSONResponse):
    def render(self, content: object) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")
