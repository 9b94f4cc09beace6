"""Hook counters on a Prometheus registry."""

from prometheus_client import CollectorRegistry, generate_latest

from gateway.hooks.delivery import Hooks
from gateway.hooks.metrics import HookCollector
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.registry import TenantRegistry


def test_sink_counters_are_exported_per_tenant_sink_and_outcome():
    tenant = TenantConfig.model_validate({
        "id": "acme", "hooks": {"subscribers": ["tests.hooks.subscribers:record_acme"]},
        "namespaces": {"n": {"collections": {"c": {"trust_tier": "partner"}}}}})
    hooks = Hooks(TenantRegistry({"acme": tenant}), {})
    events = hooks.search_events("acme", "q")
    events.started("n", ["n/c"], None)
    events.failed(RuntimeError("x"), "n", ["n/c"])
    assert hooks.tenant("acme").flush(10)
    registry = CollectorRegistry()
    registry.register(HookCollector(hooks))
    text = generate_latest(registry).decode()
    hooks.close()
    assert 'gateway_hook_events_total{outcome="delivered",sink="subscribers",tenant="acme"} 2.0' in text
    assert 'gateway_hook_events_total{outcome="dropped",sink="subscribers",tenant="acme"} 0.0' in text
