"""Memory collections and graph expansion through GraphQL: addMemory, recall with filters, federated search
with documents, and the expand stage's `via`."""

import hashlib
from collections.abc import Iterator

import pytest

from gateway.settings import Settings
from tests.serving import serve

TENANT = """
id: agentco
api_keys:
  - {sha256: "%s", role: writer}
  - {sha256: "%s", role: reader}
  - {sha256: "%s", role: writer, user_id: u1}
namespaces:
  agent:
    collections:
      memories: {trust_tier: user-generated, kind: memory, mode: dense, memory: {halfLifeDays: 7}}
      notes: {trust_tier: first-party, mode: dense}
      wiki: {trust_tier: first-party, mode: sparse}
router: {default: federated}
federation: {merge: signals}
pipelines:
  linked:
    stages:
      - expand: {seeds: 1, weight: 0.5, cap: 2, edges: links}
""".replace("halfLifeDays", "half_life_days") % (hashlib.sha256(b"agent-writer").hexdigest(),
                                                 hashlib.sha256(b"agent-reader").hexdigest(),
                                                 hashlib.sha256(b"agent-u1").hexdigest())
ADD = """mutation($c: String!, $t: String!, $u: String!, $k: String!, $i: Float) {
  addMemory(namespace: "agent", collection: $c, content: $t, userId: $u, memoryType: $k, importance: $i) {
    id userId memoryType importance createdAt } }"""
UPSERT = """mutation { upsertDocuments(namespace: "agent", collection: "notes", documents: [
  {sourceId: "pdf-policy", text: "Invoices are sent as PDF attachments on the first day of the month."}]) { chunks } }"""
SEARCH = """query($q: String!, $c: String, $f: FilterInput) { search(input: {query: $q, collection: $c, filter: $f, limit: 5}) {
  hits { chunk { collection sourceId } score provenance { retriever scores { signal raw rank } } } } }"""


@pytest.fixture(scope="module")
def agent_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    directory = tmp_path_factory.mktemp("agentco")
    (directory / "tenants").mkdir()
    (directory / "tenants" / "agentco.yaml").write_text(TENANT)
    settings = Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=directory / "tenants")
    with serve(settings) as gateway:
        yield gateway


def test_add_memory_then_recall_it_alone_and_federated_with_documents(agent_gateway):
    gw = agent_gateway
    added = gw.data(ADD, {"c": "memories", "t": "The user wants invoices as PDF by email", "u": "u1",
                          "k": "semantic", "i": 0.9}, key="agent-writer")["addMemory"]
    assert added["userId"] == "u1" and added["importance"] == 0.9 and added["id"].startswith("mem-")
    gw.data(ADD, {"c": "memories", "t": "The user asked about invoices yesterday", "u": "u2", "k": "episodic"},
            key="agent-writer")
    gw.data(UPSERT, key="agent-writer")
    mine = gw.data(SEARCH, {"q": "invoice format", "c": "memories",
                            "f": {"field": "metadata.user_id", "op": "EQ", "value": "u1"}}, key="agent-reader")
    hits = mine["search"]["hits"]
    assert [h["chunk"]["sourceId"] for h in hits] == [added["id"]]
    signals = {s["signal"]: s["raw"] for s in hits[0]["provenance"]["scores"]}
    assert {"memory", "memory:recency", "memory:relevance", "memory:importance"} <= set(signals)
    # Read although the selection asks for no metadata: the score needs it.
    assert signals["memory:importance"] == pytest.approx(0.9)
    assert hits[0]["provenance"]["retriever"] == "memory" and 0 < hits[0]["score"] <= 1
    # Federated (the default route): the memory's single signal is calibrated against the notes' dense list.
    both = gw.data(SEARCH, {"q": "invoice format"}, key="agent-reader")["search"]["hits"]
    assert {h["chunk"]["collection"] for h in both} <= {"memories", "notes", "wiki"} and "memories" in {
        h["chunk"]["collection"] for h in both}
    assert both[0]["score"] == pytest.approx(1.0)


def test_add_memory_refuses_readers_and_document_collections(agent_gateway):
    error = agent_gateway.error(ADD, {"c": "memories", "t": "x", "u": "u1", "k": "semantic"}, key="agent-reader")
    assert error["extensions"]["code"] == "FORBIDDEN"
    error = agent_gateway.error(ADD, {"c": "notes", "t": "x", "u": "u1", "k": "semantic"}, key="agent-writer")
    assert error["extensions"]["code"] == "INVALID_INPUT" and "memory collections" in error["message"]


WIKI = """mutation { upsertDocuments(namespace: "agent", collection: "wiki", documents: [
  {sourceId: "refunds", text: "Refunds go back to the original card.", metadata: {links: ["fees"]}},
  {sourceId: "fees", text: "A processing fee of two dollars applies to every transfer."}]) { chunks } }"""
LINKED = """{ search(input: {query: "refunds original card", collection: "wiki", pipeline: "linked", limit: 5}) {
  hits { chunk { sourceId } score provenance { retriever via } } trace { stages { name detail } } } }"""


def test_expand_adds_a_linked_neighbour_marked_via(agent_gateway):
    agent_gateway.data(WIKI, key="agent-writer")
    body = agent_gateway.data(LINKED, key="agent-reader")["search"]
    hits = {h["chunk"]["sourceId"]: h for h in body["hits"]}
    assert hits["refunds"]["provenance"]["via"] is None
    assert hits["fees"]["provenance"] == {"retriever": "expand", "via": "link from agent/wiki/refunds/0"}
    # The seed is the only hit and so the last within the limit: floor + 0.5 x (seed - floor) is its score.
    assert hits["fees"]["score"] == pytest.approx(hits["refunds"]["score"])
    stage = next(s for s in body["trace"]["stages"] if s["name"] == "expand")
    assert stage["detail"]["added"] == ["agent/wiki/fees/0"]
    error = agent_gateway.error(WIKI.replace('["fees"]', '"fees"'), key="agent-writer")
    assert error["extensions"]["code"] == "INVALID_INPUT" and "metadata.links" in error["message"]


SOURCE = """query($s: String!) { source(namespace: "agent", collection: "memories", sourceId: $s) { sourceId } }"""
DELETE = """mutation($s: String!) {
  deleteSource(namespace: "agent", collection: "memories", sourceId: $s) { chunkIds } }"""


def test_a_key_bound_to_a_user_reads_and_writes_only_that_users_memories(agent_gateway):
    gw = agent_gateway
    theirs = gw.data(ADD, {"c": "memories", "t": "Bound test: u2 keeps the secret door code 4471", "u": "u2",
                           "k": "semantic", "i": 1.0}, key="agent-writer")["addMemory"]["id"]
    mine = gw.data(ADD, {"c": "memories", "t": "Bound test: u1 likes the secret door painted blue", "u": "u1",
                         "k": "semantic"}, key="agent-u1")["addMemory"]["id"]
    # An unbound key sees both users' memories; the bound key only its own, filter or not, alone or federated.
    everyone = gw.data(SEARCH, {"q": "secret door", "c": "memories"}, key="agent-reader")["search"]["hits"]
    assert {mine, theirs} <= {h["chunk"]["sourceId"] for h in everyone}
    for variables in ({"q": "secret door", "c": "memories"}, {"q": "secret door"},
                      {"q": "secret door", "c": "memories",
                       "f": {"field": "metadata.user_id", "op": "EQ", "value": "u2"}}):
        hits = gw.data(SEARCH, variables, key="agent-u1")["search"]["hits"]
        ids = {h["chunk"]["sourceId"] for h in hits}
        assert theirs not in ids, (variables, ids)
        if "f" not in variables:
            assert mine in ids
    assert gw.error(SOURCE, {"s": theirs}, key="agent-u1")["extensions"]["code"] == "UNKNOWN_SOURCE"
    assert gw.data(SOURCE, {"s": mine}, key="agent-u1")["source"]["sourceId"] == mine
    # Writes: not as another user, not over another user's memory, not around addMemory, not deleting theirs.
    error = gw.error(ADD, {"c": "memories", "t": "forged", "u": "u2", "k": "semantic"}, key="agent-u1")
    assert error["extensions"]["code"] == "FORBIDDEN" and "bound to user 'u1'" in error["message"]
    replace = """mutation($id: String!) { addMemory(namespace: "agent", collection: "memories", content: "x",
      userId: "u1", memoryType: "semantic", id: $id) { id } }"""
    assert gw.error(replace, {"id": theirs}, key="agent-u1")["extensions"]["code"] == "FORBIDDEN"
    upsert = UPSERT.replace('collection: "notes"', 'collection: "memories"')
    assert gw.error(upsert, key="agent-u1")["extensions"]["code"] == "FORBIDDEN"
    assert gw.error(DELETE, {"s": theirs}, key="agent-u1")["extensions"]["code"] == "UNKNOWN_SOURCE"
    assert gw.data(SOURCE, {"s": theirs}, key="agent-reader")["source"]["sourceId"] == theirs  # still there
    assert gw.data(DELETE, {"s": mine}, key="agent-u1")["deleteSource"]["chunkIds"] == [f"agent/memories/{mine}/0"]


CONVERSE = """query($q: String!, $cid: String!) { search(input: {query: $q, collection: "notes", conversationId: $cid}) {
  hits { chunk { sourceId } } } }"""
TURNS = "query($id: String!) { conversation(id: $id) { id turns { turn query } } }"
CLEAR_TURNS = "mutation($id: String!) { clearConversation(id: $id) { turnsDeleted } }"


def test_a_key_bound_to_a_user_has_its_own_conversations(agent_gateway):
    gw = agent_gateway
    gw.data(CONVERSE, {"q": "Bound user asks where invoices go", "cid": "shared-cid"}, key="agent-u1")
    gw.data(CONVERSE, {"q": "Unbound key asks about invoice format", "cid": "shared-cid"}, key="agent-reader")
    # The same conversation id names two conversations: the bound user's and the tenant's own.
    mine = gw.data(TURNS, {"id": "shared-cid"}, key="agent-u1")["conversation"]
    assert mine["id"] == "shared-cid"
    assert [t["query"] for t in mine["turns"]] == ["Bound user asks where invoices go"]
    others = gw.data(TURNS, {"id": "shared-cid"}, key="agent-reader")["conversation"]["turns"]
    assert [t["query"] for t in others] == ["Unbound key asks about invoice format"]
    # Neither key can clear the other's turns.
    assert gw.data(CLEAR_TURNS, {"id": "shared-cid"}, key="agent-reader")["clearConversation"]["turnsDeleted"] == 1
    assert len(gw.data(TURNS, {"id": "shared-cid"}, key="agent-u1")["conversation"]["turns"]) == 1
    assert gw.data(CLEAR_TURNS, {"id": "shared-cid"}, key="agent-u1")["clearConversation"]["turnsDeleted"] == 1
