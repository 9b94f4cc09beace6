"""search(input: {pipeline:}) over HTTP against the demo tenant's offline `evidence` pipeline."""

PIPELINE_SEARCH = """
query($q: String!, $pipeline: String, $collection: String) {
  search(input: {query: $q, pipeline: $pipeline, collection: $collection}) {
    hits {
      chunk { id sourceId } content score
      parent { key content }
      provenance { scores { signal raw rank } originalChars matchedQueries queryMatches { query kind rank score } }
    }
    trace { warnings stages { name phase status inputCount outputCount warnings preview detail } }
  }
}
"""


def test_evidence_pipeline_reranks_expands_compresses_and_traces(gateway):
    data = gateway.data(PIPELINE_SEARCH, {"q": "How do I get a refund for a double charge?", "pipeline": "evidence"})
    search = data["search"]
    stages = search["trace"]["stages"]
    assert [s["name"] for s in stages] == ["route", "federate", "rerank", "abstain", "parentExpand", "compress",
                                           "diversify"]
    assert all(s["status"] == "OK" for s in stages)
    assert [s["phase"] for s in stages[2:]] == ["HITS"] * 5
    assert stages[0]["detail"]["pipeline"] == "evidence"
    for stage in stages:
        assert len(stage["preview"]) <= 5 and all(len(p) <= 240 for p in stage["preview"])
    hits = search["hits"]
    assert hits and len(hits) <= 10
    top = hits[0]
    assert any(s["signal"] == "rerank:lateInteraction" for s in top["provenance"]["scores"])
    assert top["parent"] is not None and len(top["parent"]["content"]) <= 1500
    assert all(len(h["content"]) <= 400 for h in hits)
    compressed = [h for h in hits if h["provenance"]["originalChars"] is not None]
    assert all(h["provenance"]["originalChars"] > len(h["content"]) for h in compressed)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_evidence_pipeline_abstains_on_unrelated_questions(gateway):
    search = gateway.data(PIPELINE_SEARCH, {"q": "banana bread recipe with walnuts", "pipeline": "evidence"})["search"]
    assert search["hits"] == []
    abstain = next(s for s in search["trace"]["stages"] if s["name"] == "abstain")
    assert abstain["detail"]["abstained"] is True and abstain["outputCount"] == 0
    assert "under the threshold 0.35" in abstain["warnings"][0]


def test_unknown_pipeline_is_a_coded_error_listing_the_tenants_pipelines(gateway):
    error = gateway.error(PIPELINE_SEARCH, {"q": "refund", "pipeline": "deep"})
    assert error["extensions"]["code"] == "UNKNOWN_PIPELINE"
    assert error["message"] == "pipeline 'deep' is not defined for tenant 'acme'; known: evidence"


def test_another_tenants_pipeline_is_unknown(gateway):
    error = gateway.error(PIPELINE_SEARCH, {"q": "refund", "pipeline": "evidence"}, key="globex-reader")
    assert error["extensions"]["code"] == "UNKNOWN_PIPELINE" and "known: none" in error["message"]


def test_an_abstention_is_flagged_and_in_the_trace_warnings(gateway):
    query = """query($q: String!) { search(input: {query: $q, pipeline: "evidence"}) {
      hits { score } abstained trace { warnings } } }"""
    search = gateway.data(query, {"q": "banana bread recipe with walnuts"})["search"]
    assert search["hits"] == [] and search["abstained"] is True
    assert any(w.startswith("no hits: stage 'abstain' removed all") and "under the threshold 0.35" in w
               for w in search["trace"]["warnings"]), search["trace"]["warnings"]
    answered = gateway.data(query, {"q": "How do I get a refund for a double charge?"})["search"]
    assert answered["hits"] and answered["abstained"] is False


def test_an_empty_result_says_what_emptied_it(gateway):
    query = """query($input: SearchInput!) { search(input: $input) { hits { score } abstained trace { warnings } } }"""
    base = {"query": "refund", "collection": "docs"}
    by_threshold = gateway.data(query, {"input": {**base, "threshold": 1000000}})["search"]
    assert by_threshold["hits"] == [] and by_threshold["abstained"] is False
    assert by_threshold["trace"]["warnings"] == [
        "no hits: nothing in support/docs passed the threshold 1e+06 (hits scoring under it are dropped)"]
    by_filter = gateway.data(query, {"input": {**base, "filter": {"field": "source_id", "op": "EQ",
                                                                  "value": "no-such-source"}}})["search"]
    assert by_filter["trace"]["warnings"] == ["no hits: nothing in support/docs passed the filter"]
    # context has nothing to render: its NO_EVIDENCE message carries the same reason.
    error = gateway.error("""query($input: SearchInput!) { context(input: $input) { text } }""",
                          {"input": {**base, "threshold": 1000000}})
    assert error["extensions"]["code"] == "NO_EVIDENCE"
    assert "no hits: nothing in support/docs passed the threshold 1e+06" in error["message"], error["message"]
