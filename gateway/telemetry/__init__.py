"""OpenTelemetry setup: a tracer provider per app, OTLP export through the standard OTEL_* variables."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def build_tracer_provider(environ: dict[str, str], extra: SpanProcessor | None = None) -> TracerProvider:
    """Spans always exist (so every trace has an id); they are exported when OTEL_* says where.

    OTLP/HTTP export is on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    is set; the exporter reads its own OTEL_* variables (headers, timeout, protocol paths).
    """
    service = environ.get("OTEL_SERVICE_NAME", "retrieval-gateway")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not endpoint and environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        # The per-signal path is appended to the generic endpoint, as the OTLP spec says.
        endpoint = environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    if endpoint and environ.get("OTEL_SDK_DISABLED", "").lower() != "true":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    if extra is not None:
        provider.add_span_processor(extra)
    return provider


def tracer(provider: TracerProvider) -> trace.Tracer:
    return provider.get_tracer("gateway")
