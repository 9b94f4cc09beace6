"""The platform API over HTTP: a real gateway with the demo tenant files and a platform key."""

import hashlib
import time

import httpx
import pytest

from gateway.errors import Unauthenticated
from gateway.settings import Settings
from tests.serving import tenants_with

PLATFORM_KEY = "platform-operator-key"
TENANT = {"id": "newco", "namespaces": {"docs": {"collections": {"faq": {"trust_tier": "first-party",
                                                                         "mode": "sparse"}}}}}
CREATE = "mutation($c: JSON!) { createTenant(config: $c) { id active source keys { id role } collections } }"
ADD_KEY = "mutation($t: String!, $s: String) { addApiKey(tenant: $t, role: WRITER, sha256: $s) { id role key } }"
REVOKE = "mutation($t: String!, $k: String!) { revokeApiKey(tenant: $t, keyId: $k) { keys { id } } }"
DELETE = "mutation($t: String!, $d: Boolean!) { deleteTenant(id: $t, dryRun: $d) { dryRun keys removals { what rows } } }"
UPDATE = "mutation($t: String!, $c: JSON, $a: Boolean) { updateTenant(id: $t, config: $c, active: $a) { active collections } }"
LIST = "{ tenants(first: 1000) { tenants { id source active } } }"


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    from tests.serving import serve

    directory = tmp_path_factory.mktemp("platform")
    with serve(Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=tenants_with(directory, {}),
                        ingest_demo_on_start=False, platform_key_sha256=sha(PLATFORM_KEY),
                        tenant_sync_interval_ms=200)) as served:
        yield served


def call(gw, query, variables=None, key=PLATFORM_KEY) -> httpx.Response:
    return httpx.post(f"{gw.url}/graphql", json={"query": query, "variables": variables or {}},
                      headers={"Authorization": f"Bearer {key}"}, timeout=60)


def data(gw, query, variables=None, key=PLATFORM_KEY) -> dict:
    body = call(gw, query, variables, key).json()
    assert "errors" not in body, body
    return body["data"]


def error(gw, query, variables=None, key=PLATFORM_KEY) -> dict:
    body = call(gw, query, variables, key).json()
    assert body.get("errors"), body
    return body["errors"][0]


def test_a_tenant_key_may_not_use_the_platform_api(gw):
    found = error(gw, "{ tenants { total } }", key="demo-acme-admin")
    assert found["extensions"]["code"] == "FORBIDDEN"
    assert found["message"] == ("tenants is a platform operation: send the platform key "
                                "(GATEWAY_PLATFORM_KEY_SHA256), not a tenant's key")


def test_the_platform_key_may_not_read_a_tenants_data(gw):
    response = call(gw, '{ search(input: {query: "refund"}) { hits { content } } tenants { id } }')
    assert response.status_code == 403
    found = response.json()["errors"][0]
    assert found["extensions"]["code"] == "FORBIDDEN"
    assert found["message"].startswith("the platform key may not select search: those are tenant operations; "
                                       "allowed fields: addApiKey, createTenant")


def test_tenant_files_are_listed_with_their_file(gw):
    tenants = {t["id"]: t for t in data(gw, LIST)["tenants"]["tenants"]}
    assert tenants["acme"]["source"].endswith("acme.yaml") and tenants["acme"]["active"] is True


def test_onboard_a_tenant_add_a_key_revoke_it_and_delete_the_tenant(gw):
    created = data(gw, CREATE, {"c": TENANT})["createTenant"]
    assert created == {"id": "newco", "active": True, "source": "api", "keys": [], "collections": ["docs/faq"]}
    added = data(gw, ADD_KEY, {"t": "newco", "s": None})["addApiKey"]
    assert added["role"] == "WRITER" and len(added["key"]) == 43 and added["id"] == sha(added["key"])[:12]
    state = gw.app.state.gateway
    assert state.authenticator.authenticate(f"Bearer {added['key']}").tenant == "newco"
    # Persisted: the row in Milvus holds the digest, never the key.
    assert state.runtime.tenant_store.all()[0].config.api_keys[0].sha256 == sha(added["key"])

    revoked = data(gw, REVOKE, {"t": "newco", "k": added["id"]})["revokeApiKey"]
    assert revoked == {"keys": []}
    with pytest.raises(Unauthenticated, match="unknown API key"):
        state.authenticator.authenticate(f"Bearer {added['key']}")
    response = call(gw, "{ collections { name } }", key=added["key"])
    assert response.status_code == 401 and response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"

    dry = data(gw, DELETE, {"t": "newco", "d": True})["deleteTenant"]
    assert dry == {"dryRun": True, "keys": 0, "removals": []}
    assert "newco" in state.runtime.registry
    gone = data(gw, DELETE, {"t": "newco", "d": False})["deleteTenant"]
    assert gone["dryRun"] is False and "newco" not in state.runtime.registry
    assert "newco" not in {t["id"] for t in data(gw, LIST)["tenants"]["tenants"]}


def test_deactivating_refuses_the_tenants_keys_and_keeps_it(gw):
    data(gw, CREATE, {"c": {**TENANT, "id": "sleepy", "api_keys": [{"sha256": sha("sleepy-key")}]}})
    state = gw.app.state.gateway
    assert state.authenticator.authenticate("Bearer sleepy-key").tenant == "sleepy"
    assert data(gw, UPDATE, {"t": "sleepy", "a": False})["updateTenant"]["active"] is False
    response = call(gw, "{ collections { name } }", key="sleepy-key")
    assert response.status_code == 403
    assert response.json()["errors"][0]["message"].startswith("tenant 'sleepy' is deactivated")
    assert data(gw, UPDATE, {"t": "sleepy", "a": True})["updateTenant"]["active"] is True
    assert state.authenticator.authenticate("Bearer sleepy-key").tenant == "sleepy"


def test_add_api_key_can_bind_a_key_to_a_user(gw):
    data(gw, CREATE, {"c": {**TENANT, "id": "boundco"}})
    bind = "mutation($u: String!) { addApiKey(tenant: \"boundco\", role: WRITER, userId: $u) { key } }"
    key = data(gw, bind, {"u": "u1"})["addApiKey"]["key"]
    principal = gw.app.state.gateway.authenticator.authenticate(f"Bearer {key}")
    assert (principal.tenant, principal.user_id) == ("boundco", "u1")
    listed = data(gw, "{ tenants(first: 1000) { tenants { id keys { id role userId } } } }")["tenants"]["tenants"]
    keys = next(t["keys"] for t in listed if t["id"] == "boundco")
    assert [k["userId"] for k in keys if k["role"] == "WRITER" and k["id"] == sha(key)[:12]] == ["u1"]
    assert all(k["userId"] is None for k in keys if k["id"] != sha(key)[:12])
    admin = "mutation { addApiKey(tenant: \"boundco\", role: ADMIN, userId: \"u1\") { key } }"
    error = call(gw, admin).json()["errors"][0]
    assert error["extensions"]["code"] == "INVALID_INPUT" and "only reader and writer keys" in error["message"]
    error = call(gw, bind, {"u": "no spaces"}).json()["errors"][0]
    assert error["extensions"]["code"] == "INVALID_INPUT" and "userId" in error["message"]
    data(gw, DELETE, {"t": "boundco", "d": False})


@pytest.mark.parametrize(("query", "variables", "code", "message"), [
    (CREATE, {"c": {**TENANT, "id": "acme"}}, "TENANT_CONFLICT",
     r"^tenant 'acme' already exists \(defined in .*acme\.yaml\); choose another id"),
    (UPDATE, {"t": "acme", "a": False}, "TENANT_CONFLICT",
     r"^tenant 'acme' is defined in .*acme\.yaml \(GitOps\); the platform API may not deactivate it: change or "
     r"remove that file$"),
    (REVOKE, {"t": "nobody", "k": "abc"}, "UNKNOWN_TENANT", r"^tenant 'nobody' does not exist; \d+ tenant\(s\) do"),
    (ADD_KEY, {"t": "acme", "s": "ABC"}, "INVALID_INPUT",
     r"^addApiKey: sha256 'ABC' is not a key digest; allowed: 64 lowercase hex characters"),
    (CREATE, {"c": {"id": "bad", "namespaces": {"docs": {"collections": {"faq": {"mode": "sparse"}}}}}},
     "INVALID_INPUT", r"^1 problem\(s\) in the tenant config: createTenant: namespaces\.docs\.collections\.faq\."
                      r"trust_tier: required key is missing; allowed: first-party, partner, third-party, user-generated$"),
    (CREATE, {"c": {**TENANT, "id": "envy", "api_keys": [{"env": "X"}]}}, "INVALID_INPUT",
     r"createTenant: api_keys\.0\.env: env 'X' is read from each process's environment"),
    (CREATE, {"c": {**TENANT, "id": "thief", "api_keys": [{"sha256": sha("demo-acme-reader")}]}}, "TENANT_CONFLICT",
     r"^tenant 'thief' api_keys\[0\] is also a key of tenant 'acme' \(role 'reader'\)"),
    (CREATE, {"c": {**TENANT, "id": "boss", "api_keys": [{"sha256": sha(PLATFORM_KEY)}]}}, "TENANT_CONFLICT",
     r"^tenant 'boss' api_keys\[0\] is the platform key; a tenant key must differ$"),
])
def test_bad_platform_calls_are_typed_and_change_nothing(gw, query, variables, code, message):
    before = data(gw, LIST)["tenants"]["tenants"]
    found = error(gw, query, variables)
    assert found["extensions"]["code"] == code
    assert __import__("re").search(message, found["message"]), found["message"]
    assert data(gw, LIST)["tenants"]["tenants"] == before


def test_a_runtime_tenant_is_served(gw):
    data(gw, CREATE, {"c": {**TENANT, "id": "served", "api_keys": [{"sha256": sha("served-key")}]}})
    response = call(gw, "{ collections { namespace name } }", key="served-key")
    assert response.json() == {"data": {"collections": [{"namespace": "docs", "name": "faq"}]}}


def test_an_unknown_key_id_lists_the_tenants_key_ids(gw):
    data(gw, CREATE, {"c": {**TENANT, "id": "keyed", "api_keys": [{"sha256": sha("k1")}]}})
    found = error(gw, REVOKE, {"t": "keyed", "k": "nope"})
    assert found["extensions"]["code"] == "UNKNOWN_API_KEY"
    assert found["message"] == f"revokeApiKey: tenant 'keyed' has no API key 'nope'; its key ids: {sha('k1')[:12]}"


def test_a_change_that_drops_a_trust_tier_is_refused_and_the_old_config_stays(gw):
    data(gw, CREATE, {"c": {**TENANT, "id": "tiered"}})
    broken = {"id": "tiered", "namespaces": {"docs": {"collections": {"faq": {"mode": "sparse"}, "more": {
        "trust_tier": "partner"}}}}}
    found = error(gw, UPDATE, {"t": "tiered", "c": broken})
    assert found["extensions"]["code"] == "INVALID_INPUT" and "faq.trust_tier: required key is missing" in found["message"]
    assert gw.app.state.gateway.runtime.registry.get("tiered").namespaces["docs"].collections["faq"].trust_tier == "first-party"


def test_a_deleted_tenants_ingested_data_is_listed_then_dropped(gw):
    data(gw, CREATE, {"c": {**TENANT, "id": "datco", "api_keys": [{"sha256": sha("datco-key"), "role": "writer"}]}})
    state = gw.app.state.gateway
    # Created through the store (the admission layer of this branch does not know runtime tenants yet).
    ref = state.runtime.registry.resolve("datco", "faq")
    state.store.ensure(ref.scope)
    dry = data(gw, DELETE, {"t": "datco", "d": True})["deleteTenant"]
    assert {r["what"] for r in dry["removals"]} == {"docs/faq chunks", "docs/faq parents"} and dry["keys"] == 1
    assert state.store.exists(ref.scope)
    data(gw, DELETE, {"t": "datco", "d": False})
    assert not state.store.exists(ref.scope)
    # The next poll must not bring it back.
    time.sleep(0.5)
    assert "datco" not in state.runtime.registry


def test_the_platform_key_has_no_mcp_tools(gw):
    response = httpx.post(f"{gw.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                          headers={"Authorization": f"Bearer {PLATFORM_KEY}",
                                   "Accept": "application/json, text/event-stream"}, timeout=60)
    assert response.status_code == 403
    assert response.json()["error"]["data"] == {"code": "FORBIDDEN"}
    assert response.json()["error"]["message"].startswith("the platform key has no tools")


def test_a_bad_tenant_file_keeps_serving_the_old_config_and_readyz_says_why(gw):
    path = gw.app.state.gateway.runtime.registry.origin("globex")
    good = path.read_text()

    def replace(text):  # as git and ConfigMap updates do: a new file renamed over the old one
        path.with_suffix(".tmp").write_text(text)
        path.with_suffix(".tmp").replace(path)

    try:
        replace(good.replace("trust_tier: first-party", "trust_tier: firstparty", 1))
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            report = httpx.get(f"{gw.url}/readyz", timeout=30)
            if "tenant_config_problems" in report.json():
                break
            time.sleep(0.05)
        assert report.status_code == 200 and report.json()["status"] == "ready"
        [problem] = report.json()["tenant_config_problems"]
        assert problem.startswith(f"{path}: namespaces.") and "got 'firstparty'; did you mean 'first-party'?" in problem
        assert "tenant file changes not applied" in report.json()["reason"]
        # globex still answers with its previous config.
        assert "errors" not in call(gw, "{ collections { name } }", key="demo-globex-reader").json()
    finally:
        replace(good)


def test_tenants_are_paged_in_id_order(gw):
    first = data(gw, "{ tenants(first: 1) { tenants { id } total nextAfter } }")["tenants"]
    assert first["tenants"] == [{"id": "acme"}] and first["nextAfter"] == "acme" and first["total"] >= 2
    rest = data(gw, '{ tenants(first: 1000, after: "acme") { tenants { id } nextAfter } }')["tenants"]
    assert [t["id"] for t in rest["tenants"]] == sorted(t["id"] for t in rest["tenants"]) and "acme" not in str(rest)
    assert rest["nextAfter"] is None
    found = error(gw, "{ tenants(first: 0) { total } }")
    assert found["extensions"]["code"] == "INVALID_INPUT" and found["message"] == (
        "tenants: first 0 is out of range; allowed: 1 to 1000")


def test_new_limits_of_an_updated_tenant_apply_to_its_next_request(gw):
    config = {**TENANT, "id": "limited", "api_keys": [{"sha256": sha("limited-key")}],
              "limits": {"burst": 1, "rate": 0.01}}
    data(gw, CREATE, {"c": config})
    assert "errors" not in call(gw, "{ collections { name } }", key="limited-key").json()
    refused = call(gw, "{ collections { name } }", key="limited-key")
    assert refused.status_code == 429
    data(gw, UPDATE, {"t": "limited", "c": {**config, "limits": {"burst": 100, "rate": 100}}})
    # Admission reads the new limits at once (its drained bucket is admission's to refill).
    again = call(gw, "{ collections { name } }", key="limited-key").json()
    assert "errors" not in again or "rate of 100 requests/s (burst 100)" in again["errors"][0]["message"]
