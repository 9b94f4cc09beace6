"""Conversations through GraphQL: turns recorded by search, read back, cleared, never across tenants."""

import uuid

SEARCH = """query($q: String!, $c: String!, $cid: String) {
  search(input: {query: $q, collection: $c, limit: 3, conversationId: $cid}) {
    hits { chunk { sourceId } provenance { scores { signal raw rank } } }
    trace { stages { name detail warnings } } } }"""
READ = """query($id: String!, $last: Int) { conversation(id: $id, last: $last) {
  id turns { turn query resolvedQuery resolvedFrom hitIds createdAt expiresAt } } }"""
CLEAR = "mutation($id: String!) { clearConversation(id: $id) { id turnsDeleted } }"


def _cid() -> str:
    return f"conv-{uuid.uuid4().hex[:10]}"


def _stage(body: dict, name: str) -> dict:
    return next(s for s in body["search"]["trace"]["stages"] if s["name"] == name)


def test_search_records_turns_and_resolves_a_follow_up(gateway):
    cid = _cid()
    first = gateway.data(SEARCH, {"q": "How do refunds work?", "c": "docs", "cid": cid})
    assert _stage(first, "followUp")["detail"]["resolved"] is False
    follow = gateway.data(SEARCH, {"q": "how long does it take?", "c": "docs", "cid": cid})
    detail = _stage(follow, "followUp")["detail"]
    assert detail["resolved"] is True and detail["method"] == "rules"
    assert detail["fromTurn"] == 1 and detail["reason"] == "anaphoric word 'it'"
    assert detail["searched"] == "How do refunds work? how long does it take?"
    assert follow["search"]["hits"][0]["chunk"]["sourceId"] == "refunds.md"
    turns = gateway.data(READ, {"id": cid})["conversation"]["turns"]
    assert [t["turn"] for t in turns] == [1, 2]
    assert turns[0]["query"] == "How do refunds work?" and turns[0]["resolvedFrom"] is None
    assert turns[1]["resolvedQuery"] == detail["searched"] and turns[1]["resolvedFrom"] == 1
    assert turns[0]["hitIds"][0].startswith("support/docs/")
    assert gateway.data(READ, {"id": cid, "last": 1})["conversation"]["turns"][0]["turn"] == 2


def test_a_would_be_follow_up_is_a_new_topic_when_its_own_words_find_a_close_match(gateway):
    cid = _cid()
    gateway.data(SEARCH, {"q": "How do refunds work?", "c": "docs", "cid": cid})
    # Short, so a would-be follow-up; its own words find webhooks.md closely: a new topic, its own hits.
    body = gateway.data(SEARCH, {"q": "and webhooks?", "c": "docs", "cid": cid})
    assert _stage(body, "followUp")["detail"]["reason"] == "short query (1 content word)"
    check = _stage(body, "topicCheck")["detail"]
    assert check["newTopic"] is True and check["topic"] == "new topic"
    assert check["ownCosine"] >= check["relativeClarity"] * check["resolvedCosine"]
    assert check["ownCosine"] - check["previousCosine"] >= check["previousMargin"]
    assert check["reason"].startswith("new topic: own closeness ")
    assert body["search"]["hits"][0]["chunk"]["sourceId"] == "webhooks.md"
    assert _stage(body, "conversation")["detail"]["boosted"] == []
    turns = gateway.data(READ, {"id": cid})["conversation"]["turns"]
    assert turns[1]["resolvedQuery"] == "and webhooks?" and turns[1]["resolvedFrom"] is None
    # "and for annual plans?" finds nothing close by itself: a follow-up, searched with the question it continues.
    cid = _cid()
    gateway.data(SEARCH, {"q": "How do refunds work?", "c": "docs", "cid": cid})
    body = gateway.data(SEARCH, {"q": "and for annual plans?", "c": "docs", "cid": cid})
    detail = _stage(body, "followUp")["detail"]
    assert detail["resolved"] is True and detail["searched"] == "How do refunds work? and for annual plans?"
    assert _stage(body, "topicCheck")["detail"]["newTopic"] is False
    assert body["search"]["hits"][0]["chunk"]["sourceId"] == "refunds.md"


def test_a_conversation_is_never_read_or_appended_across_tenants(gateway):
    cid = _cid()
    gateway.data(SEARCH, {"q": "How do refunds work?", "c": "docs", "cid": cid}, key="acme-reader")
    assert gateway.data(READ, {"id": cid}, key="globex-reader")["conversation"]["turns"] == []
    # globex's search with the same id starts globex's own conversation: no acme history resolves it.
    other = gateway.data(SEARCH, {"q": "how long does it take?", "c": "docs", "cid": cid}, key="globex-reader")
    assert _stage(other, "followUp")["detail"]["turnsRead"] == 0
    assert gateway.data(CLEAR, {"id": cid}, key="globex-reader")["clearConversation"]["turnsDeleted"] == 1
    acme = gateway.data(READ, {"id": cid}, key="acme-reader")["conversation"]["turns"]
    assert [t["query"] for t in acme] == ["How do refunds work?"]
    assert gateway.data(CLEAR, {"id": cid}, key="acme-reader")["clearConversation"]["turnsDeleted"] == 1
    assert gateway.data(READ, {"id": cid}, key="acme-reader")["conversation"]["turns"] == []


def test_bad_conversation_ids_are_typed_errors_naming_the_value(gateway):
    for bad in ['x" or tenant == "globex', "", "a/b", "é" * 3, "x" * 129]:
        error = gateway.error(SEARCH, {"q": "refunds", "c": "docs", "cid": bad})
        assert error["extensions"]["code"] == "INVALID_INPUT", error
        assert "conversationId" in error["message"] and "allowed" in error["message"]
    error = gateway.error(READ, {"id": "ok-id", "last": 0})
    assert error["extensions"]["code"] == "INVALID_INPUT" and "1 to 20" in error["message"]
