"""HTTP conventions of /graphql: media types and status codes, typed variable errors, caching
headers, OPTIONS, and W3C trace context (docs/http.md)."""

import time

import httpx
import pytest

from tests.conftest import KEYS

SPEC = "application/graphql-response+json"
APOLLO_ACCEPT = f"{SPEC}, application/json;q=0.9"
CITE = "query($a: String!, $e: [EvidenceInput!]!, $r: Boolean!) { validateCitations(answer: $a, evidence: $e, required: $r) { valid } }"
EVIDENCE = [{"sourceId": "refunds.md", "chunkId": "0", "content": "Refunds take 5 days."}]


def _post(gateway, query, variables=None, accept=APOLLO_ACCEPT, key="acme-reader", **headers) -> httpx.Response:
    return httpx.post(f"{gateway.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60,
                      headers={"Authorization": f"Bearer {KEYS[key]}", "Accept": accept, **headers})


# One case per kind of coercion failure: the message graphql-core wrote, never "Unexpected error."
VARIABLE_MISTAKES = {
    "wrong enum value": ('query($m: Mode) { search(input: {query: "refund", mode: $m}) { hits { score } } }', {"m": "hybrid"},
                         "Value 'hybrid' does not exist in 'Mode' enum. Did you mean the enum value 'HYBRID'?"),
    "wrong scalar type": ('query($n: Int) { conversation(id: "c1", last: $n) { id } }', {"n": "three"},
                          "Int cannot represent non-integer value: 'three'"),
    "missing required variable": (CITE, {"e": EVIDENCE, "r": False},
                                  "Variable '$a' has invalid value: Expected a value of non-null type 'String!'"),
    "unknown input field": (CITE, {"a": "x", "e": [{**EVIDENCE[0], "page": 3}], "r": False},
                            "not to include unknown field 'page'"),
    "missing input field": (CITE, {"a": "x", "e": [{"sourceId": "refunds.md", "chunkId": "0"}], "r": False},
                            "to include required field 'content'"),
}


@pytest.mark.parametrize("kind", VARIABLE_MISTAKES)
def test_variable_mistakes_are_typed_400_request_errors(gateway, kind):
    query, variables, fragment = VARIABLE_MISTAKES[kind]
    response = _post(gateway, query, variables)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith(SPEC)
    body = response.json()
    assert "data" not in body  # a request error: execution never started
    [error] = body["errors"]
    assert error["extensions"]["code"] == "INVALID_VARIABLES"
    assert fragment in error["message"]


@pytest.mark.parametrize("kind", VARIABLE_MISTAKES)
def test_variable_mistakes_under_legacy_json_are_200_with_the_same_code(gateway, kind):
    query, variables, fragment = VARIABLE_MISTAKES[kind]
    response = _post(gateway, query, variables, accept="application/json")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["data"] is None
    assert body["errors"][0]["extensions"]["code"] == "INVALID_VARIABLES" and fragment in body["errors"][0]["message"]


def test_a_well_formed_variable_runs(gateway):
    response = _post(gateway, CITE, {"a": "Refunds take 5 days [refunds.md/0].", "e": EVIDENCE, "r": False})
    assert response.status_code == 200 and response.json()["data"]["validateCitations"]["valid"] is True


def test_validation_errors_are_400_and_field_errors_stay_200(gateway):
    invalid = _post(gateway, "{ nope }")
    assert invalid.status_code == 400 and "data" not in invalid.json()
    assert invalid.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    field_error = _post(gateway, '{ source(namespace: "support", sourceId: "no-such-source") { sourceId } }')
    assert field_error.status_code == 200 and field_error.headers["content-type"].startswith(SPEC)
    body = field_error.json()
    assert "data" in body and body["errors"][0]["path"] == ["source"]
    assert body["errors"][0]["extensions"]["code"] == "UNKNOWN_SOURCE"


def test_errors_before_execution_use_the_negotiated_media_type(gateway):
    response = httpx.post(f"{gateway.url}/graphql", json={"query": "{ collections { name } }"},
                          headers={"Accept": SPEC})
    assert response.status_code == 401 and response.headers["content-type"].startswith(SPEC)
    assert response.json() == {"errors": [{"message": "missing Authorization header; send 'Authorization: "
                                                      "Bearer <api key>'", "extensions": {"code": "UNAUTHENTICATED"}}]}


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_tenant_answers_are_private_and_never_stored(gateway, method):
    headers = {"Authorization": f"Bearer {KEYS['acme-reader']}"}
    query = "{ collections { name } }"
    response = (httpx.get(f"{gateway.url}/graphql", params={"query": query}, headers=headers) if method == "GET"
                else httpx.post(f"{gateway.url}/graphql", json={"query": query}, headers=headers))
    assert response.status_code == 200 and response.json()["data"]["collections"]
    assert response.headers["cache-control"] == "private, no-store"
    assert response.headers["vary"] == "Authorization, Accept"
    refused = httpx.get(f"{gateway.url}/graphql", params={"query": query})
    assert refused.status_code == 401 and refused.headers["cache-control"] == "private, no-store"


def test_options_is_answered_without_a_key_and_without_cors_headers_by_default(gateway):
    response = httpx.options(f"{gateway.url}/graphql", headers={
        "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"})
    assert response.status_code == 204 and response.headers["allow"] == "GET, POST, OPTIONS"
    assert "access-control-allow-origin" not in response.headers  # CORS is closed unless configured


def test_a_callers_traceparent_continues_its_trace(gateway):
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    gateway.spans.clear()
    response = _post(gateway, '{ search(input: {query: "refund", collection: "docs", limit: 1}) { trace { traceId } } }',
                     traceparent=f"00-{trace_id}-{parent_id}-01")
    assert response.json()["data"]["search"]["trace"]["traceId"] == trace_id
    request_span = _request_span(gateway)
    spans = gateway.spans.get_finished_spans()
    assert format(request_span.context.trace_id, "032x") == trace_id
    assert format(request_span.parent.span_id, "016x") == parent_id and request_span.parent.is_remote
    assert all(format(s.context.trace_id, "032x") == trace_id for s in spans)


def test_without_traceparent_a_request_starts_its_own_trace(gateway):
    gateway.spans.clear()
    _post(gateway, "{ collections { name } }")
    assert _request_span(gateway).parent is None


def _request_span(gateway):
    """The request span ends just after the answer is sent, so the client can be first."""
    for _ in range(100):
        found = [s for s in gateway.spans.get_finished_spans() if s.name == "graphql.request"]
        if found:
            [span] = found
            return span
        time.sleep(0.05)
    raise AssertionError("no graphql.request span was exported")
