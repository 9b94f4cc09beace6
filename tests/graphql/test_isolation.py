"""Property-based isolation: whatever the input, a tenant never sees or changes another tenant's rows."""

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CORPORA = Path(__file__).resolve().parents[2] / "tenants" / "corpora"
EXPECTED_CODES = {"INVALID_FILTER", "INVALID_INPUT", "LIMIT_EXCEEDED", "UNKNOWN_SOURCE", "UNKNOWN_COLLECTION",
                  "UNKNOWN_NAMESPACE", "GRAPHQL_VALIDATION_FAILED"}
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def source_ids(tenant: str) -> set[str]:
    ids = {p.relative_to(CORPORA / tenant / "docs").as_posix() for p in (CORPORA / tenant / "docs").rglob("*.md")}
    ids |= {json.loads(line)["_id"] for line in (CORPORA / tenant / "tickets.jsonl").read_text().splitlines() if line}
    return ids


OWN = {"acme": source_ids("acme"), "globex": source_ids("globex")}
HOSTILE = st.sampled_from([
    '" or tenant == "globex', "' or tenant == 'globex", '\\" or 1 == 1 or \\"', "globex", "acme",
    'x") or (tenant == "globex', "\\", '"', "tenant", "*", "%", "GLX-2001", "refunds.md", "customs-documents.md",
])
TEXT = st.one_of(HOSTILE, st.text(min_size=1, max_size=60), st.text(alphabet="\"'\\ ()=orand", min_size=1, max_size=30))
FIELDS = st.sampled_from(["source_id", "title", "chunk_id", "metadata.status", "metadata.product", "tenant",
                          "namespace", "metadata.tenant"])
OPS = st.sampled_from(["EQ", "NE", "IN", "NIN", "GT", "LT"])

SEARCH = """query($q: String!, $c: String, $m: Mode, $f: FilterInput) {
  search(input: {query: $q, collection: $c, mode: $m, filter: $f, limit: 20}) {
    hits { chunk { sourceId } parent { sourceId } provenance { tenant } } } }"""


def check_answer(body: dict, tenant: str) -> None:
    if body.get("errors"):
        assert body["errors"][0]["extensions"]["code"] in EXPECTED_CODES, body
        return
    for hit in body["data"]["search"]["hits"]:
        assert hit["provenance"]["tenant"] == tenant
        assert hit["chunk"]["sourceId"] in OWN[tenant], hit
        assert hit["parent"] is None or hit["parent"]["sourceId"] in OWN[tenant]


@PROPERTY
@given(query=TEXT, field=FIELDS, op=OPS, value=st.one_of(TEXT, st.lists(TEXT, min_size=1, max_size=3)),
       tenant=st.sampled_from(["acme", "globex"]), collection=st.sampled_from(["docs", "tickets"]),
       mode=st.sampled_from(["DENSE", "SPARSE", "HYBRID"]))
def test_search_with_hostile_filters_stays_in_tenant(gateway, query, field, op, value, tenant, collection, mode):
    variables = {"q": query, "c": collection, "m": mode, "f": {"field": field, "op": op, "value": value}}
    response = gateway.post(SEARCH, variables, key=f"{tenant}-reader")
    assert response.status_code == 200
    check_answer(response.json(), tenant)


@PROPERTY
@given(query=TEXT, tenant=st.sampled_from(["acme", "globex"]), collection=st.sampled_from(["docs", "tickets"]))
def test_unfiltered_search_and_context_stay_in_tenant(gateway, query, tenant, collection):
    body = gateway.post(SEARCH, {"q": query, "c": collection}, key=f"{tenant}-reader").json()
    check_answer(body, tenant)
    ctx = gateway.post('query($q: String!, $c: String) { context(input: {query: $q, collection: $c}) { hits { chunk { sourceId } } } }',
                       {"q": query, "c": collection}, key=f"{tenant}-reader").json()
    if not ctx.get("errors"):
        assert {h["chunk"]["sourceId"] for h in ctx["data"]["context"]["hits"]} <= OWN[tenant]


@PROPERTY
@given(source=st.one_of(HOSTILE, st.sampled_from(sorted(OWN["globex"])), st.text(min_size=1, max_size=40))
       .filter(lambda s: s not in OWN["acme"]),  # acme's own sources stay, for the other tests
       collection=st.sampled_from(["docs", "tickets"]))
def test_source_and_delete_never_reach_another_tenant(gateway, source, collection):
    body = gateway.post('query($s: String!, $c: String) { source(namespace: "support", sourceId: $s, collection: $c) { chunks { chunkId } } }',
                        {"s": source, "c": collection}, key="acme-reader").json()
    assert body["errors"][0]["extensions"]["code"] in EXPECTED_CODES, body
    before = counts(gateway, "globex")
    deleted = gateway.post('mutation($s: String!, $c: String!) { deleteSource(namespace: "support", collection: $c, sourceId: $s) { chunksDeleted } }',
                           {"s": source, "c": collection}, key="acme-writer").json()
    assert deleted["errors"][0]["extensions"]["code"] in EXPECTED_CODES, deleted
    assert counts(gateway, "globex") == before


def counts(gateway, tenant: str) -> dict[str, int]:
    data = gateway.data("{ collections { name chunkCount } }", key=f"{tenant}-reader")
    return {c["name"]: c["chunkCount"] for c in data["collections"]}
