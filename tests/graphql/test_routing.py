"""Routed and federated search through GraphQL, with partial failures in the response extensions."""

QUERY = """query($q: String!, $federated: Boolean! = false, $metadata: JSON, $namespaces: [String!]) {
  search(input: {query: $q, federated: $federated, metadata: $metadata, namespaces: $namespaces}) {
    hits { chunk { collection sourceId } provenance { route retriever scores { signal rank } } }
    trace { warnings stages { name phase detail warnings } } } }"""


def test_query_routed_by_keyword(gateway):
    data = gateway.data(QUERY, {"q": "my account shows error code BILLING_402_PAYMENT_REQUIRED"})["search"]
    route = data["trace"]["stages"][0]
    assert route["name"] == "route" and route["detail"]["router"] == "keyword"
    assert route["detail"]["routes"] == ["support/tickets"]
    assert {h["chunk"]["collection"] for h in data["hits"]} == {"tickets"}
    assert data["hits"][0]["provenance"]["route"] == "keyword:support/tickets"


def test_query_routed_by_metadata_and_default_federated(gateway):
    routed = gateway.data(QUERY, {"q": "encryption at rest", "metadata": {"source": "docs"}})["search"]
    assert routed["trace"]["stages"][0]["detail"]["router"] == "metadata"
    federated = gateway.data(QUERY, {"q": "encryption at rest"})["search"]
    detail = federated["trace"]["stages"][0]["detail"]
    assert (detail["router"], detail["route"]) == ("default", "federated")
    assert federated["trace"]["stages"][1]["name"] == "federate"
    assert all(h["provenance"]["retriever"] == "federated" for h in federated["hits"])
    assert all(any(s["signal"].startswith("collection:") for s in h["provenance"]["scores"]) for h in federated["hits"])


def test_globex_routes_with_its_own_rules(gateway):
    data = gateway.data(QUERY, {"q": "customs declaration forms"}, key="globex-reader")["search"]
    assert data["trace"]["stages"][0]["detail"]["router"] == "default"
    assert {h["chunk"]["collection"] for h in data["hits"]} == {"docs"}


def test_partial_failure_is_named_in_trace_and_extensions(gateway):
    state = gateway.app.state.gateway
    ref = state.searcher.registry.resolve("acme", "tickets", namespace="support")
    state.store._client.rename_collection(ref.scope.chunk_collection, ref.scope.chunk_collection + "_away")
    try:
        body = gateway.post(QUERY, {"q": "refund for an outage", "federated": True}).json()
    finally:
        state.store._client.rename_collection(ref.scope.chunk_collection + "_away", ref.scope.chunk_collection)
        state.store._client.load_collection(ref.scope.chunk_collection)
    assert "errors" not in body
    assert body["data"]["search"]["hits"] and {h["chunk"]["collection"] for h in body["data"]["search"]["hits"]} == {"docs"}
    [failure] = body["extensions"]["partialFailures"]
    assert failure["collection"] == "support/tickets" and failure["code"] == "STORAGE_UNAVAILABLE"
    assert any("support/tickets" in w for w in body["data"]["search"]["trace"]["warnings"])
