"""Build the admission runtime from settings and the tenant registry (at start-up)."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.admission.asgi import AdmissionRuntime, Estimator
from gateway.admission.gate import Admission, AdmissionObserver
from gateway.admission.limits import TenantLimits, default_limits, tenant_limits
from gateway.admission.workers import RequestWorkers, default_workers
from gateway.errors import ConfigError
from gateway.settings import Settings
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.registry import TenantRegistry


def limits_by_tenant(settings: Settings, registry: TenantRegistry) -> dict[str, TenantLimits]:
    """Every tenant's limits, checked now so a bad override stops start-up with its tenant named."""
    out, problems = _limits(settings, registry)
    if problems:
        raise ConfigError(problems[0][1])
    return out


def limit_problems(settings: Settings, tenants: Iterable[TenantConfig]) -> list[tuple[str | None, str]]:
    """(tenant id, or None for the settings, message) for every limit start-up refuses, all at once."""
    return _limits(settings, tenants)[1]


def _limits(settings: Settings, tenants: Iterable[TenantConfig]
            ) -> tuple[dict[str, TenantLimits], list[tuple[str | None, str]]]:
    try:
        defaults = default_limits(settings)
    except ValueError as exc:
        return {}, [(None, f"admission settings (GATEWAY_TENANT_*): {exc}")]
    out, problems = {}, []
    for tenant in tenants:
        if not tenant.limits.model_fields_set:
            out[tenant.id] = defaults  # no `limits:` section: nothing to check (most tenants)
            continue
        try:
            out[tenant.id] = tenant_limits(defaults, tenant.limits)
        except ValueError as exc:
            problems.append((tenant.id, f"tenant {tenant.id!r} limits: {exc}"))
    return out, problems


def build_admission(settings: Settings, registry: TenantRegistry, observer: AdmissionObserver,
                    estimate: Estimator) -> AdmissionRuntime:
    limits_by_tenant(settings, registry)  # every tenant's overrides checked once, at start-up
    defaults = default_limits(settings)

    def limits_of(tenant: str) -> TenantLimits:
        return tenant_limits(defaults, registry.get(tenant).limits)

    admission = Admission(limits_of, observer=observer)
    hook = getattr(observer, "requests_waiting", None)
    workers = RequestWorkers(settings.request_workers or default_workers(),
                             max_running=lambda tenant: admission.limits(tenant).max_running, on_queue_change=hook)
    return AdmissionRuntime(admission, workers, estimate)
