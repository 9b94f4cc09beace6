"""The registry changes at runtime: whole swaps, listeners after each change."""

import threading

from gateway.tenancy.config import TenantConfig
from gateway.tenancy.derived import PerTenant
from gateway.tenancy.registry import TenantRegistry


def tenant(tenant_id: str, tier: str = "partner") -> TenantConfig:
    return TenantConfig.model_validate({"id": tenant_id, "namespaces": {"docs": {"collections": {
        "faq": {"trust_tier": tier}}}}})


def test_listeners_hear_changed_and_removed_tenants_not_unchanged_ones():
    registry = TenantRegistry({"acme": tenant("acme")})
    heard = []
    registry.subscribe(heard.append)
    registry.put(tenant("acme"))  # equal config, same origin: no change
    registry.put(tenant("acme", "first-party"))
    registry.put(tenant("globex"))
    registry.remove("acme")
    registry.remove("nobody")
    assert heard == ["acme", "globex", "acme"]
    assert [t.id for t in registry] == ["globex"] and registry.origin("globex") is None


def test_a_failing_listener_does_not_keep_the_others_stale():
    registry = TenantRegistry({})
    heard = []
    registry.subscribe(lambda tenant_id: 1 / 0)
    registry.subscribe(heard.append)
    registry.put(tenant("acme"))
    assert heard == ["acme"]


def test_readers_iterating_during_changes_see_one_whole_version():
    registry = TenantRegistry({f"t{i}": tenant(f"t{i}") for i in range(200)})
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            registry.remove("t0")
            registry.put(tenant("t0"))

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(200):
            ids = [t.id for t in registry]  # a dict changing during iteration would raise here
            assert len(ids) in (199, 200)
    finally:
        stop.set()
        thread.join()


def test_per_tenant_values_are_rebuilt_after_their_tenant_changes():
    registry = TenantRegistry({"acme": tenant("acme")})
    builds = []
    tiers = PerTenant(registry.get, lambda t: builds.append(t.id) or t.namespaces["docs"].collections["faq"].trust_tier)
    assert tiers.get("acme") == "partner" and tiers.get("acme") == "partner" and builds == ["acme"]
    registry.put(tenant("acme", "first-party"))
    registry.put(tenant("globex"))
    assert tiers.get("acme") == "first-party" and tiers.get("globex") == "partner"
    assert builds == ["acme", "acme", "globex"]
