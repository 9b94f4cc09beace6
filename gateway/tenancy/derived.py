"""Per-tenant values derived from a tenant's config (router chains, pipelines, cost models),
kept current as the registry changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from gateway.tenancy.config import TenantConfig
from gateway.tenancy.registry import TenantRegistry

T = TypeVar("T")
_MISSING = object()


class PerTenant(Generic[T]):
    """`build(tenant)` for each tenant: at construction for the tenants known then (so a broken
    config stops start-up), on first use for tenants added later; dropped when its tenant changes
    or goes, so the next use builds it from the new config.

    >>> chains = PerTenant(registry, RouterChain)
    >>> chains["acme"].decide(...)
    """

    def __init__(self, registry: TenantRegistry, build: Callable[[TenantConfig], T], *, eager: bool = True) -> None:
        self._registry = registry
        self._build = build
        self._values: dict[str, T] = {t.id: build(t) for t in registry} if eager else {}
        registry.subscribe(self._changed)

    def __getitem__(self, tenant_id: str) -> T:
        value = self._values.get(tenant_id, _MISSING)
        if value is _MISSING:
            # Two threads may both build it; each value is complete, and the last one stays.
            value = self._build(self._registry.get(tenant_id))  # KeyError: not a tenant
            self._values[tenant_id] = value
        return value  # type: ignore[return-value]

    def get(self, tenant_id: str, default: T | None = None) -> T | None:
        if tenant_id not in self._registry:
            return default
        return self[tenant_id]

    def __iter__(self):
        return ((t.id, self[t.id]) for t in self._registry)

    def _changed(self, tenant_id: str) -> None:
        self._values.pop(tenant_id, None)
