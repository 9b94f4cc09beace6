"""Automatic persisted queries over HTTP (POST and GET), per tenant, with Apollo's own
PersistedQueryLink in Node, and a tenant that accepts only its listed operations."""

import json
import shutil
import subprocess

import httpx
import pytest

from gateway.graphql.persisted import sha256_hex
from tests.conftest import KEYS, ROOT
from tests.serving import LISTED, serve_listed

EXAMPLES = ROOT / "examples" / "typescript"
SPEC = "application/graphql-response+json"


def _extension(query: str) -> dict:
    return {"persistedQuery": {"version": 1, "sha256Hash": sha256_hex(query)}}


def _post(gateway, body: dict, key: str = "acme-reader", accept: str = SPEC) -> httpx.Response:
    return httpx.post(f"{gateway.url}/graphql", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {KEYS[key]}", "Accept": accept})


def _get(gateway, params: dict, key: str = "acme-reader") -> httpx.Response:
    return httpx.get(f"{gateway.url}/graphql", timeout=60, headers={"Authorization": f"Bearer {KEYS[key]}"},
                     params={k: json.dumps(v) if isinstance(v, dict) else v for k, v in params.items()})


def test_hash_only_is_not_found_until_registered_then_served_over_post_and_get(gateway):
    query = '{ collections { name trustTier } }'
    missing = _post(gateway, {"extensions": _extension(query)})
    assert missing.status_code == 400 and "data" not in missing.json()
    [error] = missing.json()["errors"]
    assert error["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND" and sha256_hex(query) in error["message"]
    legacy = _post(gateway, {"extensions": _extension(query)}, accept="application/json")
    assert legacy.status_code == 200 and legacy.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"

    registered = _post(gateway, {"query": query, "extensions": _extension(query)})
    assert registered.status_code == 200 and registered.json()["data"]["collections"]
    by_post = _post(gateway, {"extensions": _extension(query)})
    by_get = _get(gateway, {"extensions": _extension(query)})
    assert by_post.json() == by_get.json() == registered.json()
    assert by_get.headers["cache-control"] == "private, no-store"


def test_a_registration_is_invisible_to_other_tenants(gateway):
    query = '{ collections { name defaultLimit } }'
    assert _post(gateway, {"query": query, "extensions": _extension(query)}).status_code == 200
    other = _post(gateway, {"extensions": _extension(query)}, key="globex-reader")
    assert other.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"


def test_a_hash_that_does_not_match_the_query_is_a_typed_error(gateway):
    response = _post(gateway, {"query": "{ collections { name } }", "extensions": _extension("{ other }")})
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["extensions"]["code"] == "INVALID_INPUT"
    assert f"{sha256_hex('{ other }')} is not the sha256 of the query sent" in error["message"]


def test_apollo_persisted_query_link_falls_back_and_then_sends_hashes(gateway):
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (needed for examples/typescript)")
    if not (EXAMPLES / "node_modules" / "@apollo" / "client").is_dir():
        pytest.skip("examples/typescript has no node_modules: run `npm install` there (.ci/run does)")
    completed = subprocess.run([node, "apq.mjs"], cwd=EXAMPLES, capture_output=True, text=True, timeout=120,
                               env={"PATH": "/usr/bin:/bin", "GATEWAY_URL": f"{gateway.url}/graphql",
                                    "GATEWAY_KEY": KEYS["acme-reader"]})
    assert completed.returncode == 0, completed.stderr
    runs = {run["label"]: run for run in json.loads(completed.stdout)}
    step = lambda label: [(e["method"], e["fullQuery"], e["status"], e["codes"]) for e in runs[label]["exchanges"]]
    # First use of each query: the hash alone is unknown, the link retries with the full query (POST).
    assert step("post-first") == [("POST", False, 400, ["PERSISTED_QUERY_NOT_FOUND"]), ("POST", True, 200, [])]
    assert step("get-first") == [("GET", False, 400, ["PERSISTED_QUERY_NOT_FOUND"]), ("POST", True, 200, [])]
    # Afterwards a fresh client sends only the hash, and gets the answer.
    assert step("post-again") == [("POST", False, 200, [])]
    assert step("get-again") == [("GET", False, 200, [])]
    assert all(run["collections"] == ["support/docs", "support/tickets"] for run in runs.values())


@pytest.fixture(scope="module")
def listed_gateway(tmp_path_factory):
    """globex accepts only the operations in its manifest; acme keeps the open default."""
    with serve_listed(tmp_path_factory.mktemp("allowlist")) as served:
        yield served


def test_a_tenant_with_an_allow_list_runs_only_listed_operations(listed_gateway):
    by_hash = _post(listed_gateway, {"extensions": _extension(LISTED)}, key="globex-reader")
    in_full = _post(listed_gateway, {"query": LISTED}, key="globex-reader")
    assert by_hash.status_code == in_full.status_code == 200
    assert by_hash.json()["data"]["collections"] == in_full.json()["data"]["collections"]
    other = "{ collections { name mode } }"
    for body in ({"query": other}, {"query": other, "extensions": _extension(other)}, {"extensions": _extension(other)}):
        refused = _post(listed_gateway, body, key="globex-reader")
        assert refused.status_code == 403, body
        [error] = refused.json()["errors"]
        assert error["extensions"]["code"] == "OPERATION_NOT_ALLOWED"
        assert f"operation {sha256_hex(other)} is not in tenant 'globex''s operation manifest" in error["message"]
    assert _post(listed_gateway, {"query": other}, key="acme-reader").status_code == 200  # acme is open
