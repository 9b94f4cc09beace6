import pytest

from gateway.admission.setup import limits_by_tenant
from gateway.errors import ConfigError
from gateway.settings import Settings
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.registry import TenantRegistry


def registry(limits: dict | None = None) -> TenantRegistry:
    config = TenantConfig.model_validate({
        "id": "acme", "namespaces": {"ns": {"collections": {"docs": {"trust_tier": "first-party"}}}},
        **({"limits": limits} if limits is not None else {})})
    return TenantRegistry({"acme": config})


def test_settings_are_the_defaults_and_the_tenant_file_overrides_them():
    settings = Settings(tenant_max_concurrent=3, deadline_ms=9000)
    assert limits_by_tenant(settings, registry())["acme"].max_concurrent == 3
    limits = limits_by_tenant(settings, registry({"max_concurrent": 7, "deadline_ms": 250, "queue_timeout_ms": 0}))["acme"]
    assert (limits.max_concurrent, limits.deadline_s, limits.queue_timeout_s) == (7, 0.25, 0.0)
    assert limits.rate == settings.tenant_rate  # what the file leaves out keeps the default


def test_a_tenant_cost_burst_below_its_ceiling_stops_start_up_naming_the_tenant():
    with pytest.raises(ConfigError, match="tenant .acme. limits: cost_burst 100000 is below max_cost 500000"):
        limits_by_tenant(Settings(), registry({"max_cost": 500_000}))


def test_settings_with_a_cost_burst_below_the_ceiling_stop_start_up():
    with pytest.raises(ConfigError, match="GATEWAY_TENANT_"):
        limits_by_tenant(Settings(tenant_max_cost=10, tenant_cost_burst=5), registry())


def test_unknown_limit_keys_are_configuration_errors():
    with pytest.raises(ValueError, match="max_concurency"):
        registry({"max_concurency": 3})


def test_a_tenant_file_with_both_figures_is_checked_when_loaded():
    with pytest.raises(ValueError, match="cost_burst 100 is below max_cost 500"):
        registry({"max_cost": 500, "cost_burst": 100})
