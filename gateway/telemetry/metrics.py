"""Prometheus metrics for operators, in one registry per app (no process-global state).

Labels are bounded: tenants come from configuration ("-" before authentication), operations
from the schema's root fields, codes from ErrorCode, stages from pipeline stage kinds.
"""

from __future__ import annotations

from opentelemetry.context import Context as OtelContext
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.admission.gate import AdmissionObserver, Refusal
from gateway.admission.scheduler import current_tenant

NO_TENANT = "-"
# Request latency buckets (seconds): from a cached search to a deadline.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics(AdmissionObserver):
    """Every metric the gateway exports; also the admission observer and the scheduler's queue hook."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("gateway_requests", "GraphQL requests by tenant, operation and result code",
                                ["tenant", "operation", "code"], registry=r)
        self.latency = Histogram("gateway_request_duration_seconds", "GraphQL request latency by tenant",
                                 ["tenant"], buckets=LATENCY_BUCKETS, registry=r)
        self.stage_latency = Histogram("gateway_stage_duration_seconds", "Retrieval stage latency",
                                       ["tenant", "phase", "stage"], buckets=LATENCY_BUCKETS, registry=r)
        self.in_flight_requests = Gauge("gateway_in_flight_requests", "Requests executing, by tenant",
                                        ["tenant"], registry=r)
        self.queued_requests = Gauge("gateway_queued_requests", "Requests waiting for a tenant slot",
                                     ["tenant"], registry=r)
        self.waiting_requests = Gauge("gateway_worker_queued_requests",
                                      "Admitted requests waiting for a request worker", ["tenant"], registry=r)
        self.rejections = Counter("gateway_rejections", "Requests refused by admission control, by reason",
                                  ["tenant", "reason"], registry=r)
        self.storage_errors = Counter("gateway_storage_errors", "Requests that failed with STORAGE_UNAVAILABLE",
                                      ["tenant"], registry=r)
        self.cost = Counter("gateway_cost_units", "Estimated cost units of admitted requests", ["tenant"],
                            registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # AdmissionObserver
    def in_flight(self, tenant: str, count: int) -> None:
        self.in_flight_requests.labels(tenant).set(count)

    def queued(self, tenant: str, count: int) -> None:
        self.queued_requests.labels(tenant).set(count)

    def refused(self, tenant: str, reason: Refusal) -> None:
        self.rejections.labels(tenant, reason.value).inc()

    # RequestWorkers hook
    def requests_waiting(self, tenant: str, count: int) -> None:
        self.waiting_requests.labels(tenant).set(count)

    def request_done(self, tenant: str | None, operation: str, code: str, seconds: float, cost: int) -> None:
        tenant = tenant or NO_TENANT
        self.requests.labels(tenant, operation, code).inc()
        self.latency.labels(tenant).observe(seconds)
        if cost:
            self.cost.labels(tenant).inc(cost)
        if code == "STORAGE_UNAVAILABLE":
            self.storage_errors.labels(tenant).inc()


class StageMetrics(SpanProcessor):
    """Feeds stage spans (those with a `gateway.stage` attribute) into the stage histogram.

    Spans end inside the request's context, so the tenant is the current lane's.
    """

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def on_start(self, span: Span, parent_context: OtelContext | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        stage = attributes.get("gateway.stage")
        if not isinstance(stage, str) or span.start_time is None or span.end_time is None:
            return
        # "retrieve:support/docs" -> "retrieve": one series per stage kind, not per collection.
        kind = stage.split(":", 1)[0]
        self._metrics.stage_latency.labels(current_tenant() or NO_TENANT, str(attributes.get("gateway.phase", "")),
                                           kind).observe((span.end_time - span.start_time) / 1e9)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
