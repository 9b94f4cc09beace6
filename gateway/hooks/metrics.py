"""Hook delivery counters as Prometheus metrics, read from the sinks at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gateway.hooks.delivery import Hooks, SinkStats

OUTCOMES = tuple(SinkStats.__dataclass_fields__)


class HookCollector(Collector):
    """`gateway_hook_events_total{tenant, sink, outcome}`: queued, dropped (queue full), delivered,
    failed (given up), retried (webhook attempts after the first)."""

    def __init__(self, hooks: Hooks) -> None:
        self._hooks = hooks

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("gateway_hook_events", "Lifecycle hook events by tenant, sink and outcome",
                                     labels=["tenant", "sink", "outcome"])
        for (tenant, sink), stats in sorted(self._hooks.stats().items()):
            for outcome in OUTCOMES:
                family.add_metric([tenant, sink, outcome], getattr(stats, outcome))
        yield family
