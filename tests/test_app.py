"""Health, readiness and start-up behaviour of the Starlette app."""

import httpx
import pytest

from gateway.app import create_app
from gateway.errors import ConfigError
from gateway.settings import Settings


def test_healthz_and_readyz(gateway):
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready" and body["milvus"] == "milvus-lite" and body["not_loaded"] == []


def test_bad_tenant_config_stops_start_up_with_the_problem(tmp_path):
    (tmp_path / "t.yaml").write_text("id: t\nnamespaces: {ns: {collections: {c: {mode: hybrid}}}}\n")
    app = create_app(Settings(milvus_uri=str(tmp_path / "g.db"), tenants_dir=tmp_path))
    from starlette.testclient import TestClient

    with pytest.raises(ConfigError, match=r"t.yaml: namespaces.ns.collections.c.trust_tier: required key is missing"):
        with TestClient(app):
            pass


def test_readyz_loads_a_released_collection_again(gateway):
    store = gateway.app.state.gateway.store
    registry = gateway.app.state.gateway.runtime.registry
    ref = registry.resolve("acme", "docs", namespace="support")
    store.guard.raw.release_collection(ref.scope.chunk_collection)
    assert not store.is_loaded(ref.scope)
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert store.is_loaded(ref.scope)

