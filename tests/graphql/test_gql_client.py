"""A stock GraphQL client (gql, over HTTP) against the running gateway."""

import pytest
from gql import Client, gql
from gql.transport.exceptions import TransportQueryError
from gql.transport.httpx import HTTPXTransport


def client(gateway, key: str) -> Client:
    transport = HTTPXTransport(url=f"{gateway.url}/graphql", headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return Client(transport=transport, fetch_schema_from_transport=True)


def test_gql_client_validates_against_introspected_schema_and_searches(gateway):
    with client(gateway, "demo-globex-reader") as session:
        result = session.execute(gql("""
            query Evidence($q: String!) {
              search(input: {query: $q, collection: "docs", limit: 2}) {
                hits { chunk { sourceId } score parent { key } provenance { tenant trustTier } }
                trace { traceId stages { name status } }
              }
            }"""), variable_values={"q": "customs paperwork for international shipments"})
    hits = result["search"]["hits"]
    assert hits[0]["chunk"]["sourceId"] == "customs-documents.md"
    assert {h["provenance"]["tenant"] for h in hits} == {"globex"}
    assert [s["name"] for s in result["search"]["trace"]["stages"]][0] == "route"


def test_gql_client_sees_coded_errors(gateway):
    with client(gateway, "demo-globex-reader") as session:
        with pytest.raises(TransportQueryError) as caught:
            session.execute(gql('{ search(input: {query: "x", collection: "secret"}) { hits { chunk { sourceId } } } }'))
    assert caught.value.errors[0]["extensions"]["code"] == "UNKNOWN_COLLECTION"
