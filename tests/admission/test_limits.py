from gateway.admission import limits
from gateway.admission.limits import INFLIGHT_COST_PER_CORE, default_limits
from gateway.settings import Settings


def test_cost_in_flight_defaults_to_a_budget_per_core(monkeypatch):
    monkeypatch.setattr(limits.os, "cpu_count", lambda: 2)
    assert default_limits(Settings()).max_inflight_cost == 2 * INFLIGHT_COST_PER_CORE
    monkeypatch.setattr(limits.os, "cpu_count", lambda: 16)
    assert default_limits(Settings()).max_inflight_cost == 16 * INFLIGHT_COST_PER_CORE


def test_a_heavy_pipeline_request_runs_alone_on_two_cores(monkeypatch):
    # The `evidence` pipeline at limit 100 costs about 6,200 units (docs/operations.md, cost model):
    # a flooding tenant's second one waits for its first instead of taking the other core.
    monkeypatch.setattr(limits.os, "cpu_count", lambda: 2)
    assert default_limits(Settings()).max_inflight_cost < 2 * 6_157


def test_a_configured_budget_wins(monkeypatch):
    monkeypatch.setenv("GATEWAY_TENANT_MAX_INFLIGHT_COST", "20000")
    assert default_limits(Settings()).max_inflight_cost == 20_000
