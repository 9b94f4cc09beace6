"""The platform lifecycle service on a real milvus-lite store: what deleteTenant finds and drops."""

from gateway.jobs.store import Job, JobState, JobStore
from gateway.tenancy.auth import ApiKeyAuthenticator
from gateway.tenancy.persisted import TenantStore
from gateway.tenancy.platform import Platform
from gateway.tenancy.registry import TenantRegistry

CONFIG = {"id": "gone", "namespaces": {"docs": {"collections": {"faq": {"trust_tier": "partner"}}}}}


def test_delete_lists_then_drops_the_tenants_collections_and_records(lite_store):
    registry = TenantRegistry({})
    platform = Platform(registry, TenantStore(lite_store), lite_store, ApiKeyAuthenticator(registry, {}))
    platform.create(CONFIG)
    scope = registry.resolve("gone", "faq").scope
    lite_store.ensure(scope)
    JobStore(lite_store).save("gone", Job(id="a" * 32, namespace="docs", collection="faq", state=JobState.QUEUED,
                                          total=1))
    dry = platform.delete("gone", dry_run=True)
    assert [(r.what, r.rows) for r in dry.removals] == [("docs/faq chunks", 0), ("docs/faq parents", 0),
                                                        ("ingest jobs", 1)]
    assert "gone" in registry and lite_store.exists(scope)
    done = platform.delete("gone", dry_run=False)
    assert done.removals == dry.removals and not done.dry_run
    assert "gone" not in registry and not lite_store.exists(scope)
    assert not lite_store.guard.has_collection(dry.removals[2].collection)
    assert [v for v in TenantStore(lite_store).all() if v.tenant_id == "gone"][0].config is None  # a tombstone
    # The same id can be created again, with nothing of the old tenant left.
    platform.create(CONFIG)
    assert JobStore(lite_store).get("gone", "a" * 32) is None
