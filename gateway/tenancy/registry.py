"""Resolve (tenant, namespace, collection) names to configuration, with exact errors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gateway.errors import UnknownCollection, UnknownNamespace, allowed
from gateway.storage.schema import Scope
from gateway.tenancy.config import CollectionConfig, TenantConfig


@dataclass(frozen=True, slots=True)
class CollectionRef:
    """A collection of one tenant, resolved: its storage scope and its configuration."""

    scope: Scope
    config: CollectionConfig

    @property
    def label(self) -> str:
        return f"{self.scope.namespace}/{self.scope.collection}"


class TenantRegistry:
    """All tenants, read-only after start-up."""

    def __init__(self, tenants: Mapping[str, TenantConfig]) -> None:
        self._tenants = dict(tenants)

    def __contains__(self, tenant_id: str) -> bool:
        return tenant_id in self._tenants

    def __iter__(self) -> Iterator[TenantConfig]:
        return iter(self._tenants.values())

    def get(self, tenant_id: str) -> TenantConfig:
        return self._tenants[tenant_id]

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
