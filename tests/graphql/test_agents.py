"""validateCitations and toolDefinitions over GraphQL."""

CHECK = """query($a: String!, $e: [EvidenceInput!]!, $r: Boolean) {
  validateCitations(answer: $a, evidence: $e, required: $r) {
    valid citations { marker sourceId chunkId status sentence quote } uncitedSentences { index text } } }"""
EVIDENCE = [{"sourceId": "refunds.md", "chunkId": "0", "content": "Refunds take five business days."}]


def test_validate_citations_reports_each_marker(gateway):
    answer = 'Refunds take "five business days" [refunds.md/0]. They are "instant" [refunds.md/0]. See [x.md/1]. Bye.'
    report = gateway.data(CHECK, {"a": answer, "e": EVIDENCE, "r": True})["validateCitations"]
    assert [c["status"] for c in report["citations"]] == ["VALID", "MISQUOTED", "UNKNOWN"]
    assert report["citations"][1]["quote"] == "instant"
    assert report["uncitedSentences"] == [{"index": 3, "text": "Bye."}]
    assert report["valid"] is False


def test_validate_citations_limits_are_coded(gateway):
    error = gateway.error(CHECK, {"a": "x", "e": EVIDENCE * 201})
    assert error["extensions"]["code"] == "LIMIT_EXCEEDED"


def test_tool_definitions_are_openai_functions(gateway):
    tools = gateway.data("{ toolDefinitions }")["toolDefinitions"]
    assert [t["function"]["name"] for t in tools] == ["search", "getSource", "validateCitations"]
    assert tools[0]["type"] == "function" and tools[0]["function"]["parameters"]["required"] == ["query"]
    # globex turned on a pair per collection (tool_prefix in tenants/globex.yaml); acme did not.
    names = [t["function"]["name"] for t in gateway.data("{ toolDefinitions }", key="globex-reader")["toolDefinitions"]]
    assert names[3:] == ["docsSearch", "docsGetSource", "ticketsSearch", "ticketsGetSource"]
