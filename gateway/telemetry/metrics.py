"""Prometheus metrics for operators, in one registry per app (no process-global state).

Labels are bounded: operations come from the schema's root fields, codes from ErrorCode, stages
from pipeline stage kinds, and tenants ("-" before authentication) from configuration, of which
only the `max_tenants` most recently active keep series: a tenant's series cost about 20 KiB,
so a process of 20,000 tenants would otherwise hold 400 MiB of them and serve every scrape all
of it. A tenant pushed out loses its series (a counter reset to Prometheus, which `rate()`
handles) and gets new ones on its next request.

With `serve --workers N`, a worker's metrics hold no series: every update goes to the supervising
parent (gateway/telemetry/hub.py), which keeps the one registry of the whole server, and a scrape
of any worker returns the parent's exposition.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from opentelemetry.context import Context as OtelContext
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.registry import Collector

from gateway.admission.gate import AdmissionObserver, Refusal
from gateway.admission.scheduler import current_tenant
from gateway.telemetry.processes import ServerProcesses

if TYPE_CHECKING:
    from gateway.telemetry.hub import HubClient

NO_TENANT = "-"
# The worker id of a single-process gateway (the access log's `worker`, /metrics' `worker` label).
SINGLE_WORKER = "0"
# Tenants with their own series (gateway_* metrics labelled `tenant`) before the least recently
# active one's are dropped.
MAX_TENANT_SERIES = 1000
# Request latency buckets (seconds): from a cached search to a deadline.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics(AdmissionObserver):
    """Every metric the gateway exports; also the admission observer and the scheduler's queue hook.

    `hub`: a worker of `serve --workers N` forwards every update to the supervising parent and
    renders the parent's view; without it, this process holds its own series.
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, max_tenants: int = MAX_TENANT_SERIES, *, hub: HubClient | None = None,
                 processes: ServerProcesses | None = None) -> None:
        self._series = TenantSeries(max_tenants)
        self._hub = hub
        self._by_name: dict[str, Any] = {}
        self._name_of: dict[int, str] = {}
        self.registry = CollectorRegistry()
        self.processes = processes if processes is not None else ServerProcesses()
        self.registry.register(self.processes)

        def add(kind: Any, name: str, help_text: str, labels: list[str], **options: Any) -> Any:
            metric = self._by_name[name] = kind(name, help_text, labels, registry=self.registry, **options)
            self._name_of[id(metric)] = name
            return metric

        self.requests = add(Counter, "gateway_requests", "GraphQL requests by tenant, operation and result code",
                            ["tenant", "operation", "code"])
        self.latency = add(Histogram, "gateway_request_duration_seconds", "GraphQL request latency by tenant",
                           ["tenant"], buckets=LATENCY_BUCKETS)
        self.stage_latency = add(Histogram, "gateway_stage_duration_seconds", "Retrieval stage latency",
                                 ["tenant", "phase", "stage"], buckets=LATENCY_BUCKETS)
        self.in_flight_requests = add(Gauge, "gateway_in_flight_requests", "Requests executing, by tenant",
                                      ["tenant"])
        self.queued_requests = add(Gauge, "gateway_queued_requests", "Requests waiting for a tenant slot",
                                   ["tenant"])
        self.waiting_requests = add(Gauge, "gateway_worker_queued_requests",
                                    "Admitted requests waiting for a request worker", ["tenant"])
        self.rejections = add(Counter, "gateway_rejections", "Requests refused by admission control, by reason",
                              ["tenant", "reason"])
        self.storage_errors = add(Counter, "gateway_storage_errors", "Requests that failed with STORAGE_UNAVAILABLE",
                                  ["tenant"])
        self.streams = add(Gauge, "gateway_mcp_streams_open", "GET /mcp (SSE) streams open, by tenant", ["tenant"])
        self.cost = add(Counter, "gateway_cost_units", "Estimated cost units of admitted requests", ["tenant"])

    @property
    def worker(self) -> str:
        """This process's worker id: its index under `serve --workers N`, else "0"."""
        return self._hub.worker if self._hub is not None else SINGLE_WORKER

    def named(self, name: str) -> Any:
        """The metric called `name` (as a worker forwards it); KeyError for any other name."""
        return self._by_name[name]

    def child(self, metric: Any, tenant: str, *labels: str) -> Any:
        """`metric.labels(tenant, *labels)`, with the tenant's series kept within the bound."""
        if self._hub is not None:
            return self._hub.child(self._name_of[id(metric)], (tenant, *labels))
        return self._series.child(metric, tenant, *labels)

    @property
    def tenants_with_series(self) -> int:
        return len(self._series)

    def register(self, collector: Collector) -> None:
        """A collector of this process's own counters (a worker sends its totals to the parent)."""
        if self._hub is not None:
            self._hub.add_totals(collector)
        else:
            self.registry.register(collector)

    def serving(self) -> None:
        """This process has started and serves requests (`gateway_worker_up` 1)."""
        if self._hub is not None:
            self._hub.serving()
        else:
            self.processes.serving(SINGLE_WORKER, os.getpid())

    def render(self) -> bytes:
        """The exposition of the whole server (blocking: with workers, it asks the parent)."""
        if self._hub is not None:
            return self._hub.render()
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
    """Which tenants have series, most recently active last; past `size`, the oldest one's go.

    A tenant's label children are kept with it: `metric.labels(...)` validates and looks the values
    up under the metric's lock, nine times a search, and a kept child is the same object it returns."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"metrics need room for at least one tenant's series, got {size}")
        self._size = size
        self._tenants: OrderedDict[str, dict[tuple[Any, tuple[str, ...]], Any]] = OrderedDict()
        self._lock = threading.Lock()

    def child(self, metric: Any, tenant: str, *labels: str) -> Any:
        key = (metric, (tenant, *labels))
        with self._lock:
            series = self._tenants.get(tenant)
            if series is None:
                series = self._tenants[tenant] = {}
                while len(self._tenants) > self._size:
                    for old_metric, old_values in self._tenants.popitem(last=False)[1]:
                        old_metric.remove(*old_values)
            else:
                self._tenants.move_to_end(tenant)
            child = series.get(key)
            if child is None:
                child = series[key] = metric.labels(*key[1])
            return child

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
