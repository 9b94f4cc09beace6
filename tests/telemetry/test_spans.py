"""Failed spans say which error, never what the client sent."""

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from gateway.errors import InvalidFilter
from gateway.telemetry.spans import private_span


def tracer_and_exporter():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


@pytest.mark.parametrize("error, code", [(InvalidFilter("value 'alice@example.com' is bad"), "INVALID_FILTER"),
                                         (RuntimeError("token sk-secret leaked"), "INTERNAL")])
def test_a_failed_span_carries_type_and_code_only(error, code):
    tracer, exporter = tracer_and_exporter()
    with pytest.raises(type(error)):
        with private_span(tracer, "stage"):
            raise error
    (span,) = exporter.get_finished_spans()
    assert span.events == ()
    assert dict(span.attributes) == {"error.type": type(error).__name__, "gateway.error.code": code}
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, code)


def test_a_successful_span_is_untouched():
    tracer, exporter = tracer_and_exporter()
    with private_span(tracer, "stage") as span:
        span.set_attribute("gateway.output_count", 3)
    (finished,) = exporter.get_finished_spans()
    assert dict(finished.attributes) == {"gateway.output_count": 3}
    assert finished.status.status_code is StatusCode.UNSET
