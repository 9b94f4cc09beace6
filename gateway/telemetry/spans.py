"""Spans that say what failed without saying what the client sent.

The SDK's default records an exception as an event with its message and stack trace; our
messages quote the client's values (a filter's e-mail address, a source id). These spans carry
the exception's type and the gateway's error code instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace as otel
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from gateway.errors import ErrorCode, GatewayError


@contextmanager
def private_span(tracer: otel.Tracer, name: str, kind: SpanKind = SpanKind.INTERNAL,
                 context: Context | None = None) -> Iterator[Span]:
    """`context`: the parent to continue (a caller's W3C traceparent); the current span by default."""
    with tracer.start_as_current_span(name, context=context, kind=kind, record_exception=False,
                                      set_status_on_exception=False) as span:
        try:
            yield span
        except BaseException as exc:
            mark_failed(span, exc)
            raise


def mark_failed(span: Span, exc: BaseException) -> None:
    """Type and code only: never the message, the arguments or the stack."""
    code = exc.code if isinstance(exc, GatewayError) else ErrorCode.INTERNAL
    span.set_attribute("error.type", type(exc).__name__)
    span.set_attribute("gateway.error.code", code.value)
    span.set_status(Status(StatusCode.ERROR, code.value))
