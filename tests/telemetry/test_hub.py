"""The parent's metrics hub with real sockets: workers' updates add up, and a scrape sees them all."""

from __future__ import annotations

import os

import pytest

from gateway.telemetry.hub import HubClient, MetricsHub
from gateway.telemetry.metrics import GatewayMetrics


@pytest.fixture
def hub():
    hub = MetricsHub(max_tenants=2).start()
    yield hub
    hub.close()


def _worker(hub: MetricsHub, worker: str, pid: int) -> GatewayMetrics:
    hub.worker_started(worker, pid)
    return GatewayMetrics(hub=HubClient(hub.directory, worker, pid=pid))


def test_updates_of_two_workers_add_up_in_every_scrape(hub):
    first, second = _worker(hub, "0", 101), _worker(hub, "1", 102)
    for _ in range(3):
        first.request_done("acme", "query:search", "OK", 0.02, 10)
    second.request_done("acme", "query:search", "OK", 0.2, 30)
    for scrape in (first.render(), second.render(), hub.render()):
        text = scrape.decode()
        assert 'gateway_requests_total{code="OK",operation="query:search",tenant="acme"} 4.0' in text
        assert 'gateway_request_duration_seconds_count{tenant="acme"} 4.0' in text
        assert 'gateway_request_duration_seconds_bucket{le="0.025",tenant="acme"} 3.0' in text
        assert 'gateway_cost_units_total{tenant="acme"} 60.0' in text
    assert first.worker == "0" and second.worker == "1"


def test_gauges_are_summed_over_live_workers_and_a_dead_ones_share_drops(hub):
    first, second = _worker(hub, "0", 101), _worker(hub, "1", 102)
    first.in_flight("acme", 2)
    second.in_flight("acme", 1)
    assert 'gateway_in_flight_requests{tenant="acme"} 3.0' in hub.render().decode()
    second.request_done("acme", "query:search", "OK", 0.01, 1)
    hub.worker_gone("1", 102)
    text = hub.render().decode()
    assert 'gateway_in_flight_requests{tenant="acme"} 2.0' in text
    assert 'gateway_requests_total{code="OK",operation="query:search",tenant="acme"} 1.0' in text  # kept


def test_liveness_and_restarts_follow_the_supervisors_reports(hub):
    worker = _worker(hub, "0", 101)
    assert 'gateway_worker_up{worker="0"} 0.0' in hub.render().decode()  # started, not serving yet
    worker.serving()
    assert 'gateway_worker_up{worker="0"} 1.0' in hub.render().decode()
    hub.worker_gone("0", 101)
    assert 'gateway_worker_up{worker="0"} 0.0' in hub.render().decode()
    hub.worker_started("0", 103, restart=True)
    text = hub.render().decode()
    assert 'gateway_worker_restarts_total{worker="0"} 1.0' in text
    assert f'gateway_process_open_fds{{pid="{os.getpid()}",worker="supervisor"}}' in text


def test_the_tenant_cap_holds_for_the_whole_server(hub):
    first, second = _worker(hub, "0", 101), _worker(hub, "1", 102)
    first.request_done("a", "query:search", "OK", 0.01, 1)
    second.request_done("b", "query:search", "OK", 0.01, 1)
    first.request_done("c", "query:search", "OK", 0.01, 1)  # "a" is the least recently active of three
    text = hub.render().decode()
    assert 'tenant="a"' not in text and 'tenant="b"' in text and 'tenant="c"' in text
    assert hub.metrics.tenants_with_series == 2


def test_the_directory_is_private_and_removed_on_close():
    hub = MetricsHub(max_tenants=10).start()
    directory = hub.directory
    assert os.stat(directory).st_mode & 0o777 == 0o700
    hub.close()
    assert not directory.exists()


def test_a_start_removes_what_a_killed_hub_left_and_keeps_a_live_ones():
    import subprocess
    import tempfile
    from pathlib import Path

    child = subprocess.Popen(["true"])
    child.wait()  # its pid no longer runs: the directory named after it is stale
    stale = Path(tempfile.mkdtemp(prefix=f"gateway-metrics-{child.pid}-"))
    (stale / "updates.sock").write_text("")
    live = Path(tempfile.mkdtemp(prefix=f"gateway-metrics-{os.getpid()}-"))
    hub = MetricsHub(max_tenants=10)
    try:
        assert not stale.exists() and live.exists()
    finally:
        hub.close()
        live.rmdir()


def test_counters_a_worker_keeps_itself_arrive_as_totals_summed_over_workers(hub):
    import time

    from prometheus_client.core import CounterMetricFamily

    class Delivered:
        def __init__(self, count: int) -> None:
            self.count = count

        def collect(self):
            family = CounterMetricFamily("gateway_hook_events", "hook events", labels=["tenant", "sink", "outcome"])
            family.add_metric(["acme", "audit", "delivered"], self.count)
            yield family

    first, second = _worker(hub, "0", 101), _worker(hub, "1", 102)
    first.register(Delivered(3))
    second.register(Delivered(4))
    expected = 'gateway_hook_events_total{outcome="delivered",sink="audit",tenant="acme"} 7.0'
    deadline = time.monotonic() + 10
    while expected not in (text := hub.render().decode()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert expected in text
    hub.worker_gone("1", 102)
    assert expected in hub.render().decode()  # a dead worker's deliveries still happened


def test_an_update_the_hub_cannot_apply_is_logged_and_the_rest_still_counts(hub, caplog):
    worker = _worker(hub, "0", 101)
    client = HubClient(hub.directory, "0", pid=101)
    client.send(["m", 101, "gateway_requests", ["acme", "query:search", "OK"], "observe", 1])  # a counter
    client.send(["m", 101, "gateway_nothing", ["acme"], "inc", 1])
    worker.request_done("acme", "query:search", "OK", 0.01, 1)
    assert 'gateway_requests_total{code="OK",operation="query:search",tenant="acme"} 1.0' in worker.render().decode()
    assert len([r for r in caplog.records if "not understood" in r.getMessage()]) == 2
