"""Adversarial, property-based: hostile ids, strings, filters, variables and bodies through the real
HTTP app on milvus-lite. Whatever arrives: no 5xx, no INTERNAL, no row of another tenant, and the
collection stays readable and writable afterwards."""

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import KEYS
from tests.graphql.test_isolation import HOSTILE, OWN, counts
from tests.serving import LISTED, serve_listed

CLIENT_CODES = {"INVALID_FILTER", "INVALID_INPUT", "LIMIT_EXCEEDED", "UNKNOWN_SOURCE", "UNKNOWN_COLLECTION",
                "UNKNOWN_NAMESPACE", "UNKNOWN_PIPELINE", "GRAPHQL_VALIDATION_FAILED", "MODE_NOT_SUPPORTED",
                "INVALID_VARIABLES"}
PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Any code point, lone surrogates and control characters included.
ANY_TEXT = st.text(st.characters(blacklist_categories=()), min_size=0, max_size=40)
IDS = st.one_of(HOSTILE, ANY_TEXT, st.sampled_from(['zz"', '~" or id != "', "a\\", "x\x00y", "\ud800", " ",
                                                    "id\u2028", "é/../../etc/passwd", "%s%n", "x" * 600]))
SCALARS = st.one_of(ANY_TEXT, st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), st.none(),
                    st.floats(allow_nan=False, allow_infinity=False))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
                    max_leaves=8)
FIELDS = st.sampled_from(["source_id", "title", "created_at", "metadata.status", "metadata.year", "tenant",
                          "namespace", "metadata.nope", "id", ""]) | ANY_TEXT
OPS = st.sampled_from(["EQ", "NE", "GT", "GTE", "LT", "LTE", "IN", "NIN"])
CONDITION = st.fixed_dictionaries({"field": FIELDS, "op": OPS, "value": JSON})
FILTERS = st.recursive(CONDITION, lambda inner: st.one_of(
    st.fixed_dictionaries({"and": st.lists(inner, max_size=3)}),
    st.fixed_dictionaries({"or": st.lists(inner, max_size=3)}),
    st.fixed_dictionaries({"not": inner})), max_leaves=6)

SEARCH = """query($q: String!, $c: String, $f: FilterInput, $n: String, $l: Int) {
  search(input: {query: $q, collection: $c, filter: $f, namespace: $n, limit: $l}) {
    hits { chunk { sourceId collection } provenance { tenant } parent { sourceId } } } }"""
UPSERT = """mutation($docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "support", collection: "tickets", documents: $docs) { chunksWritten } }"""
DELETE = """mutation($s: String!) { deleteSource(namespace: "support", collection: "tickets", sourceId: $s) {
  chunksDeleted } }"""


def post(gateway, query: str, variables: dict, key: str = "acme-reader") -> httpx.Response:
    """JSON with \\u escapes, as a hostile client sends lone surrogates (httpx's json= cannot)."""
    return send(gateway, {"query": query, "variables": variables}, key)


def send(gateway, body: object, key: str = "acme-reader") -> httpx.Response:
    return httpx.post(f"{gateway.url}/graphql", content=json.dumps(body).encode("ascii"), timeout=60,
                      headers={"Authorization": f"Bearer {KEYS[key]}", "Content-Type": "application/json"})


def answer(response: httpx.Response) -> dict:
    assert response.status_code < 500, response.text[:500]
    body = response.json()
    for error in body.get("errors") or ():
        assert error["extensions"]["code"] in CLIENT_CODES, error
    return body


@PROPERTY
@given(query=st.one_of(ANY_TEXT, HOSTILE), collection=st.one_of(st.none(), st.sampled_from(["docs", "tickets"]),
                                                                ANY_TEXT),
       flt=st.one_of(st.none(), FILTERS), namespace=st.one_of(st.none(), st.just("support"), ANY_TEXT),
       limit=st.one_of(st.none(), st.integers(min_value=-5, max_value=500)),
       tenant=st.sampled_from(["acme", "globex"]))
def test_hostile_searches_are_coded_and_stay_in_tenant(gateway, query, collection, flt, namespace, limit, tenant):
    body = answer(post(gateway, SEARCH, {"q": query, "c": collection, "f": flt, "n": namespace, "l": limit},
                               key=f"{tenant}-reader"))
    # `search` is nullable: a refused search is {"search": null}, with its error in `errors`.
    for hit in ((body.get("data") or {}).get("search") or {"hits": []})["hits"]:
        assert hit["provenance"]["tenant"] == tenant
        assert hit["chunk"]["sourceId"] in OWN[tenant]


@PROPERTY
@given(source_id=IDS.filter(lambda s: s not in OWN["acme"] | OWN["globex"]), title=ANY_TEXT, metadata=st.one_of(st.none(), JSON))
def test_hostile_writes_never_break_the_collection_or_cross_tenants(gateway, source_id, title, metadata):
    globex_before = counts(gateway, "globex")
    doc = {"sourceId": source_id, "text": "zyzzyva quokka ledger", "title": title, "metadata": metadata}
    written = answer(post(gateway, UPSERT, {"docs": [doc]}, key="acme-writer"))
    try:
        if not written.get("errors"):
            # Stored: it reads back exactly, from acme only.
            got = answer(post(gateway, 'query($s: String!) { source(namespace: "support", sourceId: $s) { sourceId } }',
                                      {"s": source_id}))
            assert got["data"]["source"]["sourceId"] == source_id
            other = answer(post(gateway, 'query($s: String!) { source(namespace: "support", sourceId: $s) { sourceId } }',
                                        {"s": source_id}, key="globex-reader"))
            assert other["errors"][0]["extensions"]["code"] == "UNKNOWN_SOURCE"
        # Whatever the id was, the next write into the same collection still works (paging is intact).
        probe = answer(post(gateway, UPSERT, {"docs": [{"sourceId": "adversarial-probe", "text": "quokka probe"}]},
                                    key="acme-writer"))
        assert "errors" not in probe
    finally:
        if not written.get("errors"):
            answer(post(gateway, DELETE, {"s": source_id}, key="acme-writer"))
        answer(post(gateway, DELETE, {"s": "adversarial-probe"}, key="acme-writer"))
    assert counts(gateway, "globex") == globex_before


@PROPERTY
@given(body=JSON, variables=st.one_of(JSON, st.dictionaries(ANY_TEXT, JSON, max_size=3)))
def test_arbitrary_bodies_and_variables_are_coded(gateway, body, variables):
    answer(send(gateway, body))
    answer(send(gateway, {"query": SEARCH, "variables": variables}))


# --- Content-Type -------------------------------------------------------------------------------
# One parse decides whether a POST body is JSON, for the checks and for Strawberry alike: a media
# type that is not exactly application/json is refused with 415 before anything reads the body.

# Parsed by email.message (Strawberry's parser), both hold "application/json" in the mime type;
# neither starts with it, so the checks before this fix let their bodies through unread.
SMUGGLING = ['a/b"; "application/json', '"text;"application/json']
NOT_JSON = [*SMUGGLING, 'text;"application/json', "text/plain", "application/jsonx", "application/x-json", "application/graphql",
            "application/json; charset=latin-1", "application/json, text/plain", "", "multipart/form-data"]


@pytest.fixture(scope="module")
def listed(tmp_path_factory):
    with serve_listed(tmp_path_factory.mktemp("content-type")) as served:
        yield served


def _raw(gateway, content: bytes, content_type: str | None, key: str = "globex-reader") -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEYS[key]}", "Accept": "application/graphql-response+json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    return httpx.post(f"{gateway.url}/graphql", content=content, headers=headers, timeout=60)


@pytest.mark.parametrize("content_type", SMUGGLING)
def test_a_smuggled_json_content_type_cannot_run_an_unlisted_operation(listed, content_type):
    response = _raw(listed, json.dumps({"query": "{ collections { name mode } }"}).encode(), content_type)
    assert response.status_code == 415, response.text
    [error] = response.json()["errors"]
    assert error["extensions"]["code"] == "INVALID_INPUT"
    assert f"Content-Type {content_type!r} is not supported; allowed: application/json" in error["message"]
    assert "data" not in response.json()


@pytest.mark.parametrize("content_type", [*SMUGGLING, "application/json"])
def test_a_json_string_body_is_a_4xx_whatever_the_content_type(listed, content_type):
    response = _raw(listed, b'"hello"', content_type)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["errors"][0]["extensions"]["code"] == "INVALID_INPUT"


@pytest.mark.parametrize("content_type", [*SMUGGLING, "application/json"])
def test_variables_nested_500_deep_are_a_4xx_whatever_the_content_type(listed, content_type):
    body = b'{"query": "query Listed { collections { name } }", "variables": {"v": ' + b"[" * 500 + b"]" * 500 + b"}}"
    response = _raw(listed, body, content_type)
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["errors"][0]["extensions"]["code"] in {"INVALID_INPUT", "LIMIT_EXCEEDED"}


@pytest.mark.parametrize("content_type", NOT_JSON + [None])
def test_anything_but_application_json_is_415_naming_what_is_allowed(listed, content_type):
    response = _raw(listed, json.dumps({"query": LISTED}).encode(), content_type, key="acme-reader")
    assert response.status_code == 415, (content_type, response.text)
    assert "allowed: application/json" in response.json()["errors"][0]["message"]


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON", "application/json;charset=utf-8",
                                          'application/json; charset="UTF-8"', "application/json ; charset=utf-8"])
def test_application_json_in_its_usual_spellings_runs(listed, content_type):
    response = _raw(listed, json.dumps({"query": LISTED}).encode(), content_type)
    assert response.status_code == 200 and response.json()["data"]["collections"], response.text


def test_a_get_with_a_query_string_ignores_the_content_type(listed):
    response = httpx.get(f"{listed.url}/graphql", params={"query": LISTED}, timeout=60,
                         headers={"Authorization": f"Bearer {KEYS['globex-reader']}", "Content-Type": SMUGGLING[0]})
    assert response.status_code == 200 and response.json()["data"]["collections"]
    unlisted = httpx.get(f"{listed.url}/graphql", params={"query": "{ collections { name mode } }"}, timeout=60,
                         headers={"Authorization": f"Bearer {KEYS['globex-reader']}", "Content-Type": SMUGGLING[0]})
    assert unlisted.status_code == 403
