"""validateCitations and toolDefinitions over GraphQL."""

from contextlib import contextmanager
from pathlib import Path

from gateway.grounding.citations import format_marker
from gateway.grounding.support import MAX_CHECKS, THRESHOLDS

ROOT = Path(__file__).resolve().parents[2]

CHECK = """query($a: String!, $e: [EvidenceInput!]!, $r: Boolean) {
  validateCitations(answer: $a, evidence: $e, required: $r, support: false) {
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


SUPPORT = """query($a: String!, $e: [EvidenceInput!], $s: StoredEvidenceInput, $support: Boolean) {
  validateCitations(answer: $a, evidence: $e, stored: $s, support: $support) {
    valid unchecked citations { marker sourceId status quote support { verdict score supportedAt weakAt } } } }"""
# The demo corpus's refunds page, first 800 characters: what its chunk 0 holds.
REFUNDS = [{"sourceId": "refunds.md", "chunkId": "0",
            "content": (ROOT / "tenants/corpora/acme/docs/refunds.md").read_text()[:800]}]
UPSERT = """mutation($docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "support", collection: "docs", documents: $docs) { chunksWritten } }"""


def check(gateway, answer, evidence=None, stored=None, support=True, key="acme-reader"):
    variables = {"a": answer, "e": evidence, "s": stored, "support": support}
    return gateway.data(SUPPORT, variables, key=key)["validateCitations"]


def test_a_citation_its_chunk_does_not_back_is_not_supported(gateway):
    report = check(gateway, "Refunds are always returned to the original payment method [refunds.md/0]. "
                            "Refunds are always paid in cash within one hour [refunds.md/0].", REFUNDS)
    backed, invented = report["citations"]
    assert backed["status"] == invented["status"] == "VALID"
    assert backed["support"]["verdict"] == "SUPPORTED"
    assert invented["support"]["verdict"] != "SUPPORTED"
    assert invented["support"]["score"] < backed["support"]["score"]
    assert backed["support"]["supportedAt"] == THRESHOLDS.supported_at
    assert backed["support"]["weakAt"] == THRESHOLDS.weak_at
    bare = check(gateway, "always paid in cash within one hour [refunds.md/0]", REFUNDS)
    assert bare["citations"][0]["support"]["verdict"] == "UNSUPPORTED" and bare["valid"] is False


def test_support_false_skips_the_model_and_unknown_citations_are_never_scored(gateway):
    report = check(gateway, "always paid in cash within one hour [refunds.md/0] [refunds.md/9].", REFUNDS,
                   support=False)
    assert [c["support"] for c in report["citations"]] == [None, None]
    assert report["unchecked"] == 0
    report = check(gateway, "Refunds go to the original payment method [refunds.md/9].", REFUNDS)
    assert report["citations"][0]["status"] == "UNKNOWN" and report["citations"][0]["support"] is None


def test_support_checks_are_bounded_per_call_and_the_rest_counted(gateway):
    evidence = [{"sourceId": f"s{i}", "chunkId": "0", "content": f"Fact number {i} holds."} for i in range(20)]
    answer = " ".join(f"Fact number {i} holds [s{i}/0]." for i in range(MAX_CHECKS + 3))
    report = check(gateway, answer, evidence)
    checked = [c for c in report["citations"] if c["support"] is not None]
    assert len(checked) == MAX_CHECKS and report["unchecked"] == 3
    assert [c["support"] for c in report["citations"][MAX_CHECKS:]] == [None, None, None]


def test_stored_evidence_is_read_by_id_so_invented_evidence_fails(gateway):
    with _written(gateway, "cite[v2].md", "Exports run nightly at 02:00 UTC.", "acme-writer"):
        _stored_evidence_is_read_by_id(gateway, "cite[v2].md")


def _stored_evidence_is_read_by_id(gateway, source):
    marker = format_marker(source, "0")
    stored = {"namespace": "support", "collection": "docs"}
    report = check(gateway, f'Exports run "nightly at 02:00 UTC" {marker}.', stored=stored)
    assert [(c["marker"], c["sourceId"], c["status"]) for c in report["citations"]] == [(marker, source, "VALID")]
    assert report["citations"][0]["support"]["verdict"] == "SUPPORTED" and report["valid"] is True
    # The same claim with evidence the caller made up: passes with `evidence`, fails against the store.
    invented = [{"sourceId": "made-up.md", "chunkId": "0", "content": "Exports run hourly."}]
    answer = 'Exports run "hourly" [made-up.md/0]. They run "hourly" ' + marker + "."
    assert check(gateway, answer, invented, support=False)["citations"][0]["status"] == "VALID"
    report = check(gateway, answer, stored=stored, support=False)
    assert [c["status"] for c in report["citations"]] == ["UNKNOWN", "MISQUOTED"] and report["valid"] is False


def test_stored_evidence_never_reads_another_tenants_source(gateway):
    with _written(gateway, "globex-manifest.md", "Manifests are signed daily.", "globex-writer"):
        answer = "Manifests are signed daily [globex-manifest.md/0]."
        stored = {"namespace": "support", "collection": "docs"}
        assert check(gateway, answer, stored=stored, key="globex-reader")["citations"][0]["status"] == "VALID"
        report = check(gateway, answer, stored=stored)  # acme's key
        assert report["citations"][0]["status"] == "UNKNOWN" and report["citations"][0]["support"] is None
        assert report["valid"] is False
        report = check(gateway, answer, stored={"namespace": "support"})  # every collection of the namespace
        assert report["citations"][0]["status"] == "UNKNOWN"


def test_evidence_and_stored_are_exclusive(gateway):
    for evidence, stored, word in ((REFUNDS, {"namespace": "support"}, "both"), (None, None, "neither")):
        error = gateway.error(SUPPORT, {"a": "x [refunds.md/0]", "e": evidence, "s": stored})
        assert error["extensions"]["code"] == "INVALID_INPUT"
        assert error["message"] == f"validateCitations takes exactly one of evidence and stored; got {word}"


@contextmanager
def _written(gateway, source, text, key):
    """A source written to support/docs for one test and deleted after it: other tests of the
    shared gateway (test_isolation) know each tenant's sources."""
    gateway.data(UPSERT, {"docs": [{"sourceId": source, "text": text}]}, key=key)
    try:
        yield
    finally:
        gateway.data('mutation($s: String!) { deleteSource(namespace: "support", collection: "docs", sourceId: $s) '
                     "{ chunksDeleted } }", {"s": source}, key=key)
