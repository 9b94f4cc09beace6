"""API tenants in Milvus: versions, tombstones, and reading only what changed."""

from gateway.tenancy.config import TenantConfig
from gateway.tenancy.persisted import MARKER_READ_MS, OVERLAP_US, TenantStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def tenant(tenant_id: str, tier: str = "partner") -> TenantConfig:
    return TenantConfig.model_validate({"id": tenant_id, "namespaces": {"docs": {"collections": {
        "faq": {"trust_tier": tier}}}}})


def test_the_newest_version_is_read_and_deletes_are_tombstones(lite_store):
    store = TenantStore(lite_store, Clock())
    first = store.save(tenant("p-acme"))
    second = store.save(tenant("p-acme", "first-party"))
    assert second > first
    [version] = [v for v in store.all() if v.tenant_id == "p-acme"]
    assert version.version == second and version.config == tenant("p-acme", "first-party")
    gone = store.delete("p-acme")
    [version] = [v for v in store.all() if v.tenant_id == "p-acme"]
    assert (version.version, version.config) == (gone, None)


def test_versions_grow_even_when_the_clock_does_not(lite_store):
    store = TenantStore(lite_store, Clock())
    versions = [store.save(tenant("p-same")) for _ in range(3)]
    assert versions == sorted(set(versions))


def test_since_reads_rows_written_after_a_version_less_the_overlap(lite_store):
    clock = Clock()
    clock.now += 3600  # after the other tests' rows (one module store)
    store = TenantStore(lite_store, clock)
    old = store.save(tenant("p-old"))
    clock.now += 60  # a minute later: outside the overlap window
    new = store.save(tenant("p-new"))
    assert new - old > OVERLAP_US
    assert {v.tenant_id for v in store.since(old + OVERLAP_US)} == {"p-new"}
    assert {v.tenant_id for v in store.since(new)} == {"p-new"}  # the overlap reads it again; appliers skip it
    assert "p-old" in {v.tenant_id for v in store.since(0)}


def test_a_write_leaves_a_marker_that_readers_see_for_a_while(lite_store):
    clock = Clock()
    clock.now += 7200
    store = TenantStore(lite_store, clock)
    before = store.markers() or frozenset()
    store.save(tenant("p-marked"))
    after = store.markers()
    assert len(after - before) == 1 and next(iter(after - before)).startswith("p-marked/")
    clock.now += MARKER_READ_MS / 1000 + 1
    assert store.markers() == frozenset()  # past the window: a poll reads no row at all
