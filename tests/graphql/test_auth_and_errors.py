"""401/403 paths, coded errors naming value and allowed set, and limits."""

import pytest

SEARCH = '{ search(input: {query: "refund", collection: "docs"}) { hits { chunk { sourceId } } } }'


@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic demo-acme-reader", "Bearer"])
def test_missing_or_unknown_key_is_401_unauthenticated(gateway, header):
    import httpx

    headers = {"Authorization": header} if header else {}
    response = httpx.post(f"{gateway.url}/graphql", json={"query": SEARCH}, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


def test_graphiql_page_is_served_to_browsers(gateway):
    import httpx

    page = httpx.get(f"{gateway.url}/graphql", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "graphiql" in page.text.lower()


def test_reader_cannot_mutate(gateway):
    for mutation in ('mutation { deleteSource(namespace: "support", collection: "docs", sourceId: "refunds.md") { chunksDeleted } }',
                     'mutation { upsertDocuments(namespace: "support", collection: "docs", documents: [{sourceId: "x", text: "y"}]) { chunksWritten } }'):
        response = gateway.post(mutation, key="acme-reader")
        # Refused inside execution: a field error in a 200 answer, as ErrorCode.FORBIDDEN says (not 403).
        assert response.status_code == 200 and response.json()["data"] is None
        error = response.json()["errors"][0]
        assert error["extensions"]["code"] == "FORBIDDEN"
        assert "role 'reader' of tenant 'acme' may not" in error["message"] and "allowed roles: writer, admin" in error["message"]
    assert gateway.data('{ source(namespace: "support", sourceId: "refunds.md") { sourceId } }')


@pytest.mark.parametrize("query, code, fragment", [
    ('{ search(input: {query: "x", collection: "tikets"}) { hits { chunk { id } } } }', "UNKNOWN_COLLECTION",
     "collection 'tikets' is not in tenant 'acme'; known: docs, tickets"),
    ('{ search(input: {query: "x", namespace: "sales", collection: "docs"}) { hits { chunk { id } } } }', "UNKNOWN_NAMESPACE",
     "namespace 'sales' is not in tenant 'acme'; known: support"),
    ('{ search(input: {query: "x", collection: "docs", filter: {field: "tenant", op: EQ, value: "globex"}}) { hits { chunk { id } } } }',
     "INVALID_FILTER", "filter field 'tenant' is not filterable here; allowed:"),
    ('{ search(input: {query: "x", collection: "docs", filter: {field: "title", op: IN, value: "a"}}) { hits { chunk { id } } } }',
     "INVALID_FILTER", "needs a list of values"),
    ('{ search(input: {query: "x", collection: "docs", filter: {field: "title", op: EQ, value: "a", not: {field: "title", op: EQ, value: "b"}}}) { hits { chunk { id } } } }',
     "INVALID_FILTER", "exactly one of"),
    ('{ search(input: {query: "x", collection: "docs", limit: 101}) { hits { chunk { id } } } }', "LIMIT_EXCEEDED",
     "limit 101 is above the maximum 100; allowed: 1 to 100"),
    ('{ search(input: {query: "x", collection: "docs", alpha: 2}) { hits { chunk { id } } } }', "LIMIT_EXCEEDED", "alpha 2.0 is outside [0, 1]"),
    ('{ search(input: {query: "   ", collection: "docs"}) { hits { chunk { id } } } }', "INVALID_INPUT", "query is empty"),
    ('{ search(input: {query: "x", collections: ["docs", "nope"]}) { hits { chunk { id } } } }', "UNKNOWN_COLLECTION",
     "collection 'nope' is not in tenant 'acme'; known: docs, tickets"),
    ('{ search(input: {query: "x", metadata: [1]}) { hits { chunk { id } } } }', "INVALID_INPUT", "metadata must be a JSON object"),
    ('{ search(input: {query: "x", collection: "docs", mode: SEMANTIC}) { hits { chunk { id } } } }', "GRAPHQL_VALIDATION_FAILED",
     "SEMANTIC"),
    ('{ source(namespace: "support", sourceId: "nope.md") { sourceId } }', "UNKNOWN_SOURCE",
     "source 'nope.md' is not in namespace 'support'"),
])
def test_expected_failures_have_codes_and_name_the_value(gateway, query, code, fragment):
    error = gateway.error(query)
    assert error["extensions"]["code"] == code
    assert fragment in error["message"]


def test_oversized_query_text_is_rejected(gateway):
    error = gateway.error('query($q: String!) { search(input: {query: $q, collection: "docs"}) { hits { chunk { id } } } }', {"q": "x" * 2001})
    assert error["extensions"]["code"] == "LIMIT_EXCEEDED"
    assert "query is 2001 characters; at most 2000 are allowed" in error["message"]


def test_depth_alias_and_body_limits(gateway):
    deep = "{ search(input: {query: \"x\", collection: \"docs\"}) { hits { parent { metadata } provenance { scores { signal } } } } }"
    assert gateway.post(deep).json().get("data")
    aliases = "{ " + " ".join(f"a{i}: collections {{ name }}" for i in range(20)) + " }"
    assert gateway.error(aliases)["extensions"]["code"] == "LIMIT_EXCEEDED"
    response = gateway.post("{ collections { name } }", {"pad": "x" * 70_000})
    assert response.status_code == 413 and response.json()["errors"][0]["extensions"]["code"] == "LIMIT_EXCEEDED"


def test_unexpected_errors_are_masked(gateway, monkeypatch):
    from gateway.routing.searcher import Searcher

    async def boom(self, principal, request, recorder=None):
        raise RuntimeError("internal detail: /secret/path")

    monkeypatch.setattr(Searcher, "search", boom)
    error = gateway.error(SEARCH)
    assert error["message"] == "Unexpected error." and error["extensions"]["code"] == "INTERNAL"


def test_depth_limit_is_configurable_and_coded():
    from gateway.graphql.schema import build_schema
    from gateway.settings import Settings

    schema = build_schema(Settings(max_query_depth=3))
    result = schema.execute_sync('{ search(input: {query: "x"}) { hits { provenance { scores { signal } } } } }')
    assert result.errors[0].extensions["code"] == "LIMIT_EXCEEDED"
    assert "exceeds maximum operation depth of 3" in result.errors[0].message


def test_a_failing_aliased_search_is_null_on_its_own(gateway):
    """One search's error (an unknown collection, an empty context) leaves the other aliases' data."""
    response = gateway.post('''{
      good: search(input: {query: "refund", collection: "docs", limit: 2}) { hits { chunk { sourceId } } }
      bad: search(input: {query: "refund", collection: "no-such-collection"}) { hits { chunk { sourceId } } }
      empty: context(input: {query: "refund", collection: "docs", threshold: 1000000}) { text }
    }''')
    body = response.json()
    assert response.status_code == 200, body
    assert len(body["data"]["good"]["hits"]) == 2
    assert body["data"]["bad"] is None and body["data"]["empty"] is None
    errors = {tuple(e["path"]): e["extensions"]["code"] for e in body["errors"]}
    assert errors == {("bad",): "UNKNOWN_COLLECTION", ("empty",): "NO_EVIDENCE"}
