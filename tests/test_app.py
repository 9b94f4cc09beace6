"""Health, readiness and start-up behaviour of the Starlette app."""

import gc
import os
import re
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from pymilvus.client.utils import SciPyHelper

from gateway.app import _warm, create_app
from gateway.errors import ConfigError
from gateway.runtime import build_runtime
from gateway.settings import Settings
from tests.conftest import KEYS, ROOT, _free_port
from tests.serving import wait_ready


def test_healthz_and_readyz(gateway):
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready" and body["milvus"] == "milvus-lite" and body["missing"] == []


def test_bad_tenant_config_stops_start_up_with_the_problem(tmp_path):
    (tmp_path / "t.yaml").write_text("id: t\nnamespaces: {ns: {collections: {c: {mode: hybrid}}}}\n")
    app = create_app(Settings(milvus_uri=str(tmp_path / "g.db"), tenants_dir=tmp_path))
    from starlette.testclient import TestClient

    with pytest.raises(ConfigError, match=r"t.yaml: namespaces.ns.collections.c.trust_tier: required key is missing"):
        with TestClient(app):
            pass
    assert gc.isenabled()  # paused while the app started, back after its failure


def test_a_refusal_after_the_store_opened_is_logged_as_cannot_start(tmp_path, caplog):
    """An app started without `serve`'s pre-check (a worker, an embedding program) refuses an unset
    env key with the one `gateway cannot start:` line too; uvicorn then drops its traceback."""
    (tmp_path / "t.yaml").write_text("id: t\napi_keys: [{env: APP_UNSET_KEY}]\n"
                                     "namespaces: {ns: {collections: {c: {trust_tier: partner}}}}\n")
    app = create_app(Settings(milvus_uri=str(tmp_path / "g.db"), tenants_dir=tmp_path, ingest_demo_on_start=False))
    from starlette.testclient import TestClient

    message = "tenant 't' api_keys[0] refers to environment variable 'APP_UNSET_KEY', which is not set"
    with pytest.raises(ConfigError, match=re.escape(message)):
        with TestClient(app):
            pass
    assert f"gateway cannot start: {message}" in caplog.messages
    assert gc.isenabled()


def test_readyz_leaves_a_released_collection_released_and_asks_nothing_per_tenant(gateway, monkeypatch):
    store = gateway.app.state.gateway.store
    registry = gateway.app.state.gateway.runtime.registry
    ref = registry.resolve("acme", "docs", namespace="support")
    store.guard.raw.release_collection(ref.scope.chunk_collection)
    asked: list[str] = []

    def probing() -> bool:
        # The gateway fixture serves the whole session: another test's background work (a job, a
        # residency sweep) may ask the store meanwhile. Only what the probe itself asks counts.
        return any(frame.name == "_readiness" for frame in traceback.extract_stack())

    for call in ("has_collection", "get_load_state", "load_collection"):
        original = getattr(store.guard.raw, call)
        monkeypatch.setattr(store.guard.raw, call, lambda *a, _call=call, _original=original, **k:
                            (probing() and asked.append(_call), _original(*a, **k))[1])
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert asked == []  # an idle tenant's collection stays released; a probe costs the same for any tenant count
    monkeypatch.undo()
    assert not store.is_loaded(ref.scope)
    hits = gateway.data('{ search(input: {query: "refund", collection: "docs"}) { hits { chunk { id } } } }')
    assert hits["search"]["hits"] and store.is_loaded(ref.scope)  # the search loads what it needs


def test_warm_up_does_the_first_use_work_a_burst_would_race(tmp_path, monkeypatch):
    # pymilvus imports scipy.sparse on first use, without a lock; threads racing it deadlocked.
    monkeypatch.setattr(SciPyHelper, "_checked", False)
    runtime = build_runtime(Settings(milvus_uri=str(tmp_path / "g.db"), tenants_dir=ROOT / "tenants"))
    try:
        _warm(runtime)
    finally:
        runtime.store.close()
    assert SciPyHelper._checked


HYBRID = '{ search(input: {query: "how do refunds work", collection: "docs", mode: HYBRID}) { hits { chunk { id } } } }'


def test_a_burst_at_a_fresh_gateway_gets_no_errors(tmp_path):
    port = _free_port()
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(tmp_path / "gateway.db"),
           "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), "GATEWAY_PORT": str(port),
           # Every search of the burst in its own thread at once, as with generous limits.
           "GATEWAY_TENANT_MAX_RUNNING": "16", "GATEWAY_REQUEST_WORKERS": "16", "GATEWAY_TENANT_MAX_CONCURRENT": "16"}
    # A new interpreter: the lazy imports of the first sparse search have not happened in it.
    process = subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)

        def search(_: int) -> dict:
            return httpx.post(f"{url}/graphql", json={"query": HYBRID}, timeout=120,
                              headers={"Authorization": f"Bearer {KEYS['acme-reader']}"}).json()

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(search, range(16)))
        assert all("errors" not in a and a["data"]["search"]["hits"] for a in answers), answers
    finally:
        process.terminate()
        process.wait(timeout=30)


TENANT_WORDS = ("acme", "globex", "support", "docs", "tickets", "gw_c_", "gw_p_")
UPSERT = """mutation($docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "support", collection: "tickets", documents: $docs) { chunksWritten } }"""


def test_readyz_tells_anyone_only_the_status_and_a_reason_without_tenants(tmp_path):
    from starlette.testclient import TestClient

    settings = Settings(milvus_uri=str(tmp_path / "g.db"), tenants_dir=ROOT / "tenants", ingest_demo_on_start=False,
                        metrics_token="ops-token")
    ops = {"Authorization": "Bearer ops-token"}
    with TestClient(create_app(settings)) as client:  # a client that is not loopback
        assert gc.isenabled()  # paused while the app started, not while it serves
        anyone = client.get("/readyz")
        assert anyone.status_code == 200 and anyone.json() == {"status": "ready"}
        assert client.get("/readyz", headers={"Authorization": "Bearer wrong"}).json() == {"status": "ready"}
        detail = client.get("/readyz", headers=ops).json()
        assert detail["status"] == "ready" and "acme:support/docs" in detail["not_ingested"]

        written = client.post("/graphql", json={"query": UPSERT, "variables": {"docs": [
            {"sourceId": "t-1", "text": "a ticket about a late parcel"}]}},
                              headers={"Authorization": f"Bearer {KEYS['acme-writer']}"})
        assert "errors" not in written.json(), written.text
        state = client.app.state.gateway
        scope = state.runtime.registry.resolve("acme", "tickets", namespace="support").scope
        state.store.guard.raw.drop_collection(state.store.physical(scope).chunks)

        anyone = client.get("/readyz")
        assert anyone.status_code == 503
        assert anyone.json() == {"status": "unavailable",
                                 "reason": "1 collection(s) the gateway wrote are missing"}
        assert not any(word in anyone.text for word in TENANT_WORDS)
        detail = client.get("/readyz", headers=ops)
        assert detail.status_code == 503 and detail.json()["missing"] == ["acme:support/tickets"]
        assert "acme:support/tickets" in detail.json()["reason"]
