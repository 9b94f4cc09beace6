"""/metrics over the real app: content after real requests, and who may read it."""

import time
from pathlib import Path

import httpx
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import Gateway

def metrics_after(gateway: Gateway, expected: str) -> str:
    """/metrics once `expected` is in it: a request is counted just after its answer is sent."""
    for _ in range(500):
        text = httpx.get(f"{gateway.url}/metrics", timeout=30).text
        if expected in text:
            return text
        time.sleep(0.01)
    return text


SEARCH = '{ search(input: {query: "how do refunds work", collection: "docs"}) { hits { chunk { sourceId } } } }'


def test_metrics_count_requests_by_tenant_operation_and_code_with_latency_and_stages(gateway: Gateway):
    assert "errors" not in gateway.post(SEARCH).json()
    gateway.post('{ search(input: {query: "x", collection: "nope"}) { hits { chunk { sourceId } } } }')
    text = metrics_after(gateway, 'code="UNKNOWN_COLLECTION"')
    assert 'gateway_requests_total{code="OK",operation="query:search",tenant="acme"}' in text
    assert 'gateway_requests_total{code="UNKNOWN_COLLECTION",operation="query:search",tenant="acme"}' in text
    assert 'gateway_request_duration_seconds_bucket{le="0.005",tenant="acme"}' in text
    assert 'gateway_stage_duration_seconds_count{phase="retrieve",stage="retrieve",tenant="acme"}' in text
    assert 'gateway_stage_duration_seconds_count{phase="route",stage="route",tenant="acme"}' in text
    assert 'gateway_in_flight_requests{tenant="acme"} 0.0' in text
    assert 'gateway_cost_units_total{tenant="acme"}' in text
    for family in ("gateway_queued_requests", "gateway_worker_queued_requests", "gateway_rejections_total",
                   "gateway_storage_errors_total"):
        assert f"# TYPE {family.removesuffix('_total')}" in text


def test_unauthenticated_requests_are_counted_without_a_tenant(gateway: Gateway):
    assert gateway.post(SEARCH, key="not-a-key").status_code == 401
    text = metrics_after(gateway, 'code="UNAUTHENTICATED"')
    assert 'gateway_requests_total{code="UNAUTHENTICATED",operation="-",tenant="-"}' in text


def test_metrics_without_a_token_are_for_loopback_clients_only(tmp_path: Path):
    # Starlette's test client is not on loopback ("testclient"); the lifespan is not needed here.
    client = TestClient(create_app(Settings(milvus_uri=str(tmp_path / "g.db"), tenants_dir=tmp_path)))
    answer = client.get("/metrics")
    assert answer.status_code == 403
    assert "GATEWAY_METRICS_TOKEN" in answer.json()["error"]


def test_metrics_with_a_token_need_it(tmp_path: Path):
    settings = Settings(milvus_uri=str(tmp_path / "g.db"), tenants_dir=tmp_path, metrics_token="s3cret-scrape")
    client = TestClient(create_app(settings))
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
    answer = client.get("/metrics", headers={"Authorization": "Bearer s3cret-scrape"})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    assert "# TYPE gateway_requests_total counter" in answer.text


def test_only_the_most_recently_active_tenants_keep_series():
    from gateway.telemetry.metrics import GatewayMetrics

    metrics = GatewayMetrics(max_tenants=3)
    for tenant in ("a", "b", "c", "a", "d"):  # "b" is the least recently active when "d" comes
        metrics.request_done(tenant, "query:search", "OK", 0.01, 5)
        metrics.in_flight(tenant, 0)
    text = metrics.render().decode()
    assert metrics.tenants_with_series == 3
    assert 'tenant="b"' not in text
    for tenant in ("a", "c", "d"):
        assert f'gateway_requests_total{{code="OK",operation="query:search",tenant="{tenant}"}}' in text
    assert 'gateway_requests_total{code="OK",operation="query:search",tenant="a"} 2.0' in text
    metrics.request_done("b", "query:search", "OK", 0.01, 5)  # back, with a fresh series
    assert 'gateway_requests_total{code="OK",operation="query:search",tenant="b"} 1.0' in metrics.render().decode()


def test_a_single_process_reports_itself_as_worker_0_with_its_usage(gateway: Gateway):
    import os

    text = httpx.get(f"{gateway.url}/metrics", timeout=30).text
    assert 'gateway_worker_up{worker="0"} 1.0' in text
    assert 'gateway_worker_restarts_total{worker="0"} 0.0' in text
    labels = f'{{pid="{os.getpid()}",worker="0"}}'
    for series in ("gateway_process_cpu_seconds_total", "gateway_process_resident_memory_bytes",
                   "gateway_process_open_fds"):
        assert f"{series}{labels}" in text


def test_a_tenant_series_counts_on_after_its_child_was_kept_and_starts_afresh_after_eviction():
    from gateway.telemetry.metrics import GatewayMetrics

    metrics = GatewayMetrics(max_tenants=1)
    for _ in range(3):
        metrics.request_done("a", "query:search", "OK", 0.01, 5)
    assert 'gateway_requests_total{code="OK",operation="query:search",tenant="a"} 3.0' in metrics.render().decode()
    assert 'gateway_cost_units_total{tenant="a"} 15.0' in metrics.render().decode()
    metrics.request_done("b", "query:search", "OK", 0.01, 5)  # "a" goes, with the children kept for it
    metrics.request_done("a", "query:search", "OK", 0.01, 5)
    text = metrics.render().decode()
    assert 'gateway_requests_total{code="OK",operation="query:search",tenant="a"} 1.0' in text
    assert 'tenant="b"' not in text
