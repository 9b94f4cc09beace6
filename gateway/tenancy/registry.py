"""Resolve (tenant, namespace, collection) names to configuration, with exact errors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import UnknownCollection, UnknownNamespace, allowed
from gateway.storage.schema import Scope
from gateway.tenancy.config import CollectionConfig, TenantConfig

log = logging.getLogger("gateway")
# Where a tenant is defined: its YAML file (GitOps), or None for a tenant the platform API created.
Origin = Path | None
Listener = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CollectionRef:
    """A collection of one tenant, resolved: its storage scope and its configuration."""

    scope: Scope
    config: CollectionConfig

    @property
    def label(self) -> str:
        return f"{self.scope.namespace}/{self.scope.collection}"


class TenantRegistry:
    """All tenants; changed at runtime by the platform API and the YAML reloader.

    Copy-on-write: a change builds new dicts and swaps them in under a writer lock, so readers
    never lock and always see one whole version. `subscribe(listener)` learns each changed or
    removed tenant id (after the swap); a listener looks the tenant up to tell which.
    """

    def __init__(self, tenants: Mapping[str, TenantConfig], origins: Mapping[str, Origin] | None = None) -> None:
        self._tenants = dict(tenants)
        self._origins: dict[str, Origin] = dict(origins or {})
        self._write = threading.Lock()
        self._listeners: list[Listener] = []

    def __contains__(self, tenant_id: str) -> bool:
        return tenant_id in self._tenants

    def __iter__(self) -> Iterator[TenantConfig]:
        return iter(self._tenants.values())

    def __len__(self) -> int:
        return len(self._tenants)

    def get(self, tenant_id: str) -> TenantConfig:
        return self._tenants[tenant_id]

    def origin(self, tenant_id: str) -> Origin:
        """The tenant's YAML file, or None when the platform API manages it."""
        return self._origins.get(tenant_id)

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(tenant_id)` after each change of that tenant (created, updated, removed)."""
        with self._write:
            self._listeners = [*self._listeners, listener]

    def put(self, tenant: TenantConfig, origin: Origin = None) -> None:
        self.apply({tenant.id: (tenant, origin)})

    def remove(self, tenant_id: str) -> None:
        self.apply({tenant_id: None})

    def apply(self, changes: Mapping[str, tuple[TenantConfig, Origin] | None]) -> None:
        """Put (config, origin) or remove (None) several tenants in one swap."""
        with self._write:
            tenants, origins = dict(self._tenants), dict(self._origins)
            changed = []
            for tenant_id, change in changes.items():
                if change is None:
                    if tenants.pop(tenant_id, None) is not None:
                        origins.pop(tenant_id, None)
                        changed.append(tenant_id)
                    continue
                config, origin = change
                if tenants.get(tenant_id) != config or origins.get(tenant_id) != origin:
                    tenants[tenant_id] = config
                    origins[tenant_id] = origin
                    changed.append(tenant_id)
            self._tenants, self._origins = tenants, origins
            listeners = self._listeners
        for tenant_id in changed:
            for listener in listeners:
                try:
                    listener(tenant_id)
                except Exception:  # one broken listener must not keep the others stale
                    log.exception("tenant registry listener %r failed for tenant %r", listener, tenant_id)

    def collections(self, tenant_id: str, namespace: str | None = None) -> list[CollectionRef]:
        """Every collection the tenant may see, optionally within one namespace."""
        tenant = self._tenants[tenant_id]
        if namespace is not None:
            self._namespace(tenant, namespace)
        return [CollectionRef(Scope(tenant.id, ns_name, name), cfg)
                for ns_name, ns in tenant.namespaces.items()
                if namespace is None or ns_name == namespace
                for name, cfg in ns.collections.items()]

    def resolve(self, tenant_id: str, collection: str, namespace: str | None = None) -> CollectionRef:
        """One collection by name. Another tenant's collection is simply unknown here."""
        tenant = self._tenants[tenant_id]
        if namespace is not None:
            ns = self._namespace(tenant, namespace)
            if collection not in ns.collections:
                raise UnknownCollection(f"collection {collection!r} is not in namespace {namespace!r} "
                                        f"of tenant {tenant.id!r}; known: {allowed(ns.collections)}")
            return CollectionRef(Scope(tenant.id, namespace, collection), ns.collections[collection])
        matches = [(ns_name, ns.collections[collection]) for ns_name, ns in tenant.namespaces.items()
                   if collection in ns.collections]
        if not matches:
            known = {c for ns in tenant.namespaces.values() for c in ns.collections}
            raise UnknownCollection(f"collection {collection!r} is not in tenant {tenant.id!r}; "
                                    f"known: {allowed(known)}")
        if len(matches) > 1:
            raise UnknownCollection(f"collection {collection!r} exists in several namespaces of tenant "
                                    f"{tenant.id!r} ({allowed(m[0] for m in matches)}); name the namespace")
        ns_name, cfg = matches[0]
        return CollectionRef(Scope(tenant.id, ns_name, collection), cfg)

    @staticmethod
    def _namespace(tenant: TenantConfig, namespace: str):
        ns = tenant.namespaces.get(namespace)
        if ns is None:
            raise UnknownNamespace(f"namespace {namespace!r} is not in tenant {tenant.id!r}; "
                                   f"known: {allowed(tenant.namespaces)}")
        return ns
