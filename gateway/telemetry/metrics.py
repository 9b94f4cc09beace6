"""Prometheus metrics for operators, in one registry per app (no process-global state).

Labels are bounded: operations come from the schema's root fields, codes from ErrorCode, stages
from pipeline stage kinds, and tenants ("-" before authentication) from configuration, of which
only the `max_tenants` most recently active keep series: a tenant's series cost about 20 KiB,
so a process of 20,000 tenants would otherwise hold 400 MiB of them and serve every scrape all
of it. A tenant pushed out loses its series (a counter reset to Prometheus, which `rate()`
handles) and gets new ones on its next request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from opentelemetry.context import Context as OtelContext
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.admission.gate import AdmissionObserver, Refusal
from gateway.admission.scheduler import current_tenant

NO_TENANT = "-"
# Tenants with their own series (gateway_* metrics labelled `tenant`) before the least recently
# active one's are dropped.
MAX_TENANT_SERIES = 1000
# Request latency buckets (seconds): from a cached search to a deadline.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics(AdmissionObserver):
    """Every metric the gateway exports; also the admission observer and the scheduler's queue hook."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, max_tenants: int = MAX_TENANT_SERIES) -> None:
        self._series = TenantSeries(max_tenants)
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
        self.streams = Gauge("gateway_mcp_streams_open", "GET /mcp (SSE) streams open, by tenant", ["tenant"],
                             registry=r)
        self.cost = Counter("gateway_cost_units", "Estimated cost units of admitted requests", ["tenant"],
                            registry=r)

    def child(self, metric: Any, tenant: str, *labels: str) -> Any:
        """`metric.labels(tenant, *labels)`, with the tenant's series kept within the bound."""
        return self._series.child(metric, tenant, *labels)

    @property
    def tenants_with_series(self) -> int:
        return len(self._series)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # AdmissionObserver
    def in_flight(self, tenant: str, count: int) -> None:
        self.child(self.in_flight_requests, tenant).set(count)

    def queued(self, tenant: str, count: int) -> None:
        self.child(self.queued_requests, tenant).set(count)

    def refused(self, tenant: str, reason: Refusal) -> None:
        self.child(self.rejections, tenant, reason.value).inc()

    def streams_open(self, tenant: str, count: int) -> None:
        self.child(self.streams, tenant).set(count)

    # RequestWorkers hook
    def requests_waiting(self, tenant: str, count: int) -> None:
        self.child(self.waiting_requests, tenant).set(count)

    def request_done(self, tenant: str | None, operation: str, code: str, seconds: float, cost: int) -> None:
        tenant = tenant or NO_TENANT
        self.child(self.requests, tenant, operation, code).inc()
        self.child(self.latency, tenant).observe(seconds)
        if cost:
            self.child(self.cost, tenant).inc(cost)
        if code == "STORAGE_UNAVAILABLE":
            self.child(self.storage_errors, tenant).inc()


class TenantSeries:
    """Which tenants have series, most recently active last; past `size`, the oldest one's go."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"metrics need room for at least one tenant's series, got {size}")
        self._size = size
        self._tenants: OrderedDict[str, set[tuple[Any, tuple[str, ...]]]] = OrderedDict()
        self._lock = threading.Lock()

    def child(self, metric: Any, tenant: str, *labels: str) -> Any:
        values = (tenant, *labels)
        with self._lock:
            series = self._tenants.get(tenant)
            if series is None:
                series = self._tenants[tenant] = set()
                while len(self._tenants) > self._size:
                    for old_metric, old_values in self._tenants.popitem(last=False)[1]:
                        old_metric.remove(*old_values)
            else:
                self._tenants.move_to_end(tenant)
            series.add((metric, values))
            return metric.labels(*values)

    def __len__(self) -> int:
        return len(self._tenants)


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
        self._metrics.child(self._metrics.stage_latency, current_tenant() or NO_TENANT,
                            str(attributes.get("gateway.phase", "")), kind).observe((span.end_time - span.start_time) / 1e9)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
