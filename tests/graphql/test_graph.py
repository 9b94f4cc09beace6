"""The seed rows through GraphQL: per-record trust tiers, content keys, normalised scores, weighted
federation, inferred edges and name linking."""

import hashlib
from collections.abc import Iterator

import pytest

from gateway.settings import Settings
from tests.serving import serve

TENANT = """
id: graphco
api_keys:
  - {sha256: "%s", role: writer}
  - {sha256: "%s", role: reader}
namespaces:
  kb:
    collections:
      manuals:
        trust_tier: partner
        trust_by: {field: origin, tiers: {forum: user-generated}}
        content_keys: {embed: [title, content], index: [title, content, metadata.tags]}
        graph: {infer_threshold: 0.6, infer_per_node: 2}
      tickets: {trust_tier: third-party}
router: {default: federated}
federation: {merge: signals, weights: {tickets: 0.0}}
""" % (hashlib.sha256(b"graph-writer").hexdigest(), hashlib.sha256(b"graph-reader").hexdigest())
UPSERT = """mutation($c: String!, $d: [DocumentInput!]!) {
  upsertDocuments(namespace: "kb", collection: $c, documents: $d) { chunks } }"""
MANUALS = [
    {"sourceId": "vault", "title": "Acme Vault", "text": "Acme Vault keeps encryption keys and rotates them daily.",
     "metadata": {"origin": "vendor", "tags": ["kms"]}},
    {"sourceId": "vault-forum", "title": "Vault rotation thread",
     "text": "Acme Vault rotates encryption keys daily, and SSO logins are audited.", "metadata": {"origin": "forum"}},
    {"sourceId": "kittens", "text": "Kittens sleep for most of the day and play at night."},
]
TICKETS = [{"sourceId": "T-1", "text": "Acme Vault rotated encryption keys and a customer noticed."}]


@pytest.fixture(scope="module")
def graph_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    directory = tmp_path_factory.mktemp("graphco")
    (directory / "tenants").mkdir()
    (directory / "tenants" / "graphco.yaml").write_text(TENANT)
    settings = Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=directory / "tenants")
    with serve(settings) as gateway:
        gateway.data(UPSERT, {"c": "manuals", "d": MANUALS}, key="graph-writer")
        gateway.data(UPSERT, {"c": "tickets", "d": TICKETS}, key="graph-writer")
        yield gateway


def test_hits_carry_their_records_trust_tier_and_normalised_scores(graph_gateway):
    query = """{ search(input: {query: "encryption keys rotation", collection: "manuals", mode: HYBRID}) {
      hits { chunk { sourceId } provenance { trustTier scores { signal raw normalized } } } } }"""
    hits = graph_gateway.data(query, key="graph-reader")["search"]["hits"]
    tiers = {h["chunk"]["sourceId"]: h["provenance"]["trustTier"] for h in hits}
    assert tiers["vault"] == "PARTNER" and tiers["vault-forum"] == "USER_GENERATED"
    signals = [s for h in hits for s in h["provenance"]["scores"]]
    assert {s["signal"] for s in signals} == {"dense", "sparse"}
    assert all(0 <= s["normalized"] <= 1 for s in signals)
    assert max(s["normalized"] for s in signals if s["signal"] == "sparse") == 1.0


def test_collections_describe_their_content_keys_and_trust_rule(graph_gateway):
    infos = graph_gateway.data("{ collections { name trustByField embeddedFields indexedFields } }",
                               key="graph-reader")["collections"]
    manuals = next(c for c in infos if c["name"] == "manuals")
    assert manuals == {"name": "manuals", "trustByField": "origin", "embeddedFields": ["title", "content"],
                       "indexedFields": ["title", "content", "metadata.tags"]}
    # A metadata tag is BM25-indexed.
    hits = graph_gateway.data('{ search(input: {query: "kms", collection: "manuals", mode: SPARSE}) '
                              '{ hits { chunk { sourceId } } } }', key="graph-reader")["search"]["hits"]
    assert [h["chunk"]["sourceId"] for h in hits] == ["vault"]


def test_a_zero_weight_puts_a_collection_last_in_the_federated_merge(graph_gateway):
    query = """{ search(input: {query: "Acme Vault rotated encryption keys", limit: 4}) {
      hits { chunk { collection } } trace { stages { name detail } } } }"""
    result = graph_gateway.data(query, key="graph-reader")["search"]
    collections = [h["chunk"]["collection"] for h in result["hits"]]
    assert "tickets" in collections and collections[-1] == "tickets"
    federate = next(s for s in result["trace"]["stages"] if s["name"] == "federate")
    assert federate["detail"]["weights"] == {"kb/manuals": 1.0, "kb/tickets": 0.0}


def test_inferred_edges_of_a_source_are_described_and_searchable(graph_gateway):
    query = """query($s: String!, $d: EdgeDirection, $m: Float) {
      inferredEdges(namespace: "kb", collection: "manuals", sourceId: $s, direction: $d, minSimilarity: $m) {
        enabled threshold perNode description edges { fromSourceId fromChunkId toSourceId relation similarity
        description } } }"""
    found = graph_gateway.data(query, {"s": "vault", "d": "OUT"}, key="graph-reader")["inferredEdges"]
    assert found["enabled"] and found["threshold"] == 0.6 and found["perNode"] == 2
    assert "cosine similarity of at least 0.6" in found["description"]
    edge = found["edges"][0]
    assert (edge["fromSourceId"], edge["toSourceId"], edge["relation"]) == ("vault", "vault-forum", "similar")
    assert edge["description"] == f"chunk 0 of 'vault' is similar to 'vault-forum' (cosine {edge['similarity']:.2f})"
    assert all(e["toSourceId"] != "kittens" for e in found["edges"])
    incoming = graph_gateway.data(query, {"s": "vault", "d": "IN"}, key="graph-reader")["inferredEdges"]["edges"]
    assert [e["fromSourceId"] for e in incoming] == ["vault-forum"]
    assert graph_gateway.data(query, {"s": "vault", "m": 0.999}, key="graph-reader")["inferredEdges"]["edges"] == []
    error = graph_gateway.error('{ inferredEdges(namespace: "kb", collection: "wiki", sourceId: "v") { enabled } }',
                                key="graph-reader")
    assert error["extensions"]["code"] == "UNKNOWN_COLLECTION" and "manuals" in error["message"]


def test_link_names_against_given_passages_and_the_tenants_sources(graph_gateway):
    answer = "Keys live in Acme Vault [vault/0], and SSO logins are audited. Ask the Helpdesk Team."
    query = """query($a: String!, $p: [PassageInput!], $s: StoredEvidenceInput) {
      linkNames(answer: $a, passages: $p, sources: $s) { name start end mentions
        citations { sourceId chunkId marker inTitle mentions } } }"""
    passages = [{"sourceId": "vault", "chunkId": "0", "title": "Acme Vault", "content": MANUALS[0]["text"]}]
    links = {link["name"]: link for link in graph_gateway.data(
        query, {"a": answer, "p": passages}, key="graph-reader")["linkNames"]}
    assert list(links) == ["Acme Vault", "SSO", "Helpdesk Team"]
    assert (links["Acme Vault"]["start"], links["Acme Vault"]["end"]) == (13, 23)
    assert links["Acme Vault"]["citations"] == [
        {"sourceId": "vault", "chunkId": "0", "marker": "[vault/0]", "inTitle": True, "mentions": 1}]
    assert links["SSO"]["citations"] == [] and links["Helpdesk Team"]["citations"] == []
    searched = {link["name"]: link for link in graph_gateway.data(
        query, {"a": answer, "s": {"namespace": "kb"}}, key="graph-reader")["linkNames"]}
    assert {c["sourceId"] for c in searched["Acme Vault"]["citations"]} == {"vault", "vault-forum", "T-1"}
    assert searched["Acme Vault"]["citations"][0]["sourceId"] == "vault"  # its title names it
    assert [c["sourceId"] for c in searched["SSO"]["citations"]] == ["vault-forum"]
    error = graph_gateway.error('{ linkNames(answer: "Acme") { name } }', key="graph-reader")
    assert error["extensions"]["code"] == "INVALID_INPUT" and "exactly one of passages and sources" in error["message"]
