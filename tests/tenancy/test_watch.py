"""Keeping registries current: tenant files reloaded on change, API tenants read from the store."""

import hashlib
import os
import time

import pytest

from gateway.errors import Unauthenticated
from gateway.storage.milvus import MilvusStore
from gateway.tenancy.auth import ApiKeyAuthenticator
from gateway.tenancy.config import Role
from gateway.tenancy.loader import load_tenant_files
from gateway.tenancy.persisted import TenantStore
from gateway.tenancy.platform import Platform
from gateway.tenancy.registry import TenantRegistry
from gateway.tenancy.watch import TenantSync

GOOD = """id: {id}
api_keys: [{{sha256: "{digest}"}}]
namespaces:
  docs:
    collections:
      faq: {{trust_tier: {tier}}}
"""


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def write(path, tenant_id, tier="first-party", key=None):
    """As editors, git and ConfigMap updates do: a new file renamed over the old one."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(GOOD.format(id=tenant_id, digest=sha(key or f"{tenant_id}-key"), tier=tier))
    os.replace(temporary, path)


def synced(directory) -> tuple[TenantRegistry, ApiKeyAuthenticator, TenantSync]:
    tenants, origins = load_tenant_files(directory)
    registry = TenantRegistry(tenants, origins)
    auth = ApiKeyAuthenticator(registry, {})
    sync = TenantSync(registry, directory)
    sync.adopt_files()
    return registry, auth, sync


def test_a_changed_file_is_reloaded_and_its_keys_follow(tmp_path):
    write(tmp_path / "acme.yaml", "acme")
    registry, auth, sync = synced(tmp_path)
    write(tmp_path / "acme.yaml", "acme", tier="partner", key="rotated")
    sync.poll()
    assert registry.get("acme").namespaces["docs"].collections["faq"].trust_tier == "partner"
    assert auth.authenticate("Bearer rotated").tenant == "acme"
    with pytest.raises(Unauthenticated):
        auth.authenticate("Bearer acme-key")


def test_a_bad_file_keeps_the_previous_config_and_says_why(tmp_path):
    write(tmp_path / "acme.yaml", "acme")
    registry, auth, sync = synced(tmp_path)
    before = registry.get("acme")
    (tmp_path / "acme.yaml").write_text(GOOD.format(id="acme", digest=sha("x"), tier="secret"))  # in place
    sync.poll(full_scan=True)
    assert registry.get("acme") is before and auth.authenticate("Bearer acme-key").tenant == "acme"
    [problem] = sync.problems()
    assert str(problem).startswith(f"{tmp_path / 'acme.yaml'}: namespaces.docs.collections.faq.trust_tier: Input should be")
    write(tmp_path / "acme.yaml", "acme", tier="partner")
    sync.poll()
    assert sync.problems() == [] and registry.get("acme").namespaces["docs"].collections["faq"].trust_tier == "partner"


def test_an_edit_in_place_is_found_by_the_full_scan_and_a_rename_at_once(tmp_path, monkeypatch):
    write(tmp_path / "acme.yaml", "acme")
    registry, _, sync = synced(tmp_path)
    (tmp_path / "acme.yaml").write_text(GOOD.format(id="acme", digest=sha("acme-key"), tier="partner"))
    sync.poll()  # the directory did not change: no file was looked at
    assert registry.get("acme").namespaces["docs"].collections["faq"].trust_tier == "first-party"
    monkeypatch.setattr("gateway.tenancy.watch.FULL_SCAN_S", 0.0)
    sync.poll()
    assert registry.get("acme").namespaces["docs"].collections["faq"].trust_tier == "partner"
    monkeypatch.setattr("gateway.tenancy.watch.FULL_SCAN_S", 3600.0)
    write(tmp_path / "acme.yaml", "acme", tier="third-party")
    sync.poll()
    assert registry.get("acme").namespaces["docs"].collections["faq"].trust_tier == "third-party"


def test_files_added_and_removed_add_and_remove_tenants(tmp_path):
    write(tmp_path / "acme.yaml", "acme")
    registry, auth, sync = synced(tmp_path)
    changed = []
    registry.subscribe(changed.append)
    write(tmp_path / "globex.yaml", "globex")
    sync.poll()
    assert "globex" in registry and auth.authenticate("Bearer globex-key").tenant == "globex"
    (tmp_path / "acme.yaml").unlink()
    sync.poll()
    assert "acme" not in registry and changed == ["globex", "acme"]
    with pytest.raises(Unauthenticated):
        auth.authenticate("Bearer acme-key")


def test_a_new_file_with_an_id_another_file_defines_is_refused(tmp_path):
    write(tmp_path / "acme.yaml", "acme")
    registry, _, sync = synced(tmp_path)
    write(tmp_path / "copy.yaml", "acme", key="other")
    sync.poll()
    assert registry.origin("acme") == tmp_path / "acme.yaml"
    [problem] = sync.problems()
    assert str(problem) == f"{tmp_path / 'copy.yaml'}: id: tenant 'acme' is already defined in {tmp_path / 'acme.yaml'}"


def test_a_key_taken_from_another_tenant_by_a_reload_is_not_accepted(tmp_path):
    write(tmp_path / "acme.yaml", "acme")
    write(tmp_path / "globex.yaml", "globex")
    registry, auth, sync = synced(tmp_path)
    write(tmp_path / "globex.yaml", "globex", key="acme-key")
    sync.poll()
    assert auth.authenticate("Bearer acme-key").tenant == "acme"


# -- two processes, one store ---------------------------------------------------------------------

def _worker(uri, directory, interval_s=0.2):
    store = MilvusStore(uri)
    tenants, origins = load_tenant_files(directory)
    registry = TenantRegistry(tenants, origins)
    auth = ApiKeyAuthenticator(registry, {})
    sync = TenantSync(registry, directory, store=TenantStore(store), interval_s=interval_s)
    sync.adopt_files()
    sync.load_store()
    return store, registry, auth, sync


def _until(check, timeout_s=2.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if check():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout_s} s")


def _accepts(auth, key):
    try:
        auth.authenticate(f"Bearer {key}")
        return True
    except Unauthenticated:
        return False


def test_a_tenant_and_a_revoked_key_reach_another_worker_within_2_s(milvus_server, tmp_path):
    write(tmp_path / "acme.yaml", "acme")
    store_a, registry_a, auth_a, sync_a = _worker(milvus_server, tmp_path)
    store_b, registry_b, auth_b, sync_b = _worker(milvus_server, tmp_path)
    sync_b.start()
    try:
        platform = Platform(registry_a, TenantStore(store_a), store_a, auth_a)
        platform.create({"id": "remote", "namespaces": {"docs": {"collections": {"faq": {"trust_tier": "partner"}}}}})
        added = platform.add_key("remote", Role.READER)
        assert _until(lambda: _accepts(auth_b, added.key)) < 2
        platform.revoke_key("remote", added.id)
        assert not _accepts(auth_a, added.key)  # this process: at once
        assert _until(lambda: not _accepts(auth_b, added.key)) < 2
        platform.delete("remote", dry_run=False)
        assert _until(lambda: "remote" not in registry_b) < 2
        # A third worker starting now reads no deleted tenant.
        store_c, registry_c, _, _ = _worker(milvus_server, tmp_path)
        assert "remote" not in registry_c and "acme" in registry_c
        store_c.close()
    finally:
        sync_b.stop()
        store_a.close()
        store_b.close()


def test_a_file_wins_over_an_api_tenant_of_the_same_id(milvus_server, tmp_path):
    write(tmp_path / "acme.yaml", "acme")
    store, registry, auth, sync = _worker(milvus_server, tmp_path)
    try:
        platform = Platform(registry, TenantStore(store), store, auth)
        platform.create({"id": "later", "namespaces": {"docs": {"collections": {"faq": {"trust_tier": "partner"}}}}})
        write(tmp_path / "later.yaml", "later", tier="first-party")
        sync.poll()
        assert registry.origin("later") == tmp_path / "later.yaml"
        assert registry.get("later").namespaces["docs"].collections["faq"].trust_tier == "first-party"
        (tmp_path / "later.yaml").unlink()
        sync.poll()
        # The file is gone: the API's version serves again.
        assert registry.origin("later") is None and "later" in registry
        platform.delete("later", dry_run=False)
    finally:
        store.close()
