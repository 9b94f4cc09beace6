"""Every field of search, context, collections and source, over HTTP against the seeded demo tenants."""

SEARCH = """
query($q: String!, $collection: String, $namespace: String, $mode: Mode, $limit: Int, $filter: FilterInput,
      $fusion: Fusion, $alpha: Float, $threshold: Float) {
  search(input: {query: $q, collection: $collection, namespace: $namespace, mode: $mode, limit: $limit,
         filter: $filter, fusion: $fusion, alpha: $alpha, threshold: $threshold}) {
    hits {
      chunk { id namespace collection sourceId chunkId title sourceUrl sourcePath metadata } content score
      parent { parentId key sourceId title summary content metadata }
      provenance { tenant namespace collection trustTier retriever mode route
                   scores { signal raw rank } fusedScore contentHash ingestedAt updatedAt matchedQueries }
    }
    trace { traceId durationMs warnings
            stages { name phase status durationMs inputCount outputCount warnings preview detail } }
  }
}
"""


def test_search_returns_citation_ready_hits(gateway):
    data = gateway.data(SEARCH, {"q": "How do I get a refund?", "collection": "docs", "limit": 3})
    hits = data["search"]["hits"]
    assert 1 <= len(hits) <= 3
    top = hits[0]
    assert top["chunk"]["sourceId"] == "refunds.md"
    # namespace/collection/sourceId/chunkId: two collections' chunks never share an id in a client cache.
    assert top["chunk"]["id"] == f"support/docs/{top['chunk']['sourceId']}/{top['chunk']['chunkId']}"
    assert top["chunk"]["namespace"] == "support" and top["chunk"]["collection"] == "docs" and top["chunk"]["title"] == "Refunds"
    assert top["chunk"]["sourcePath"] == "refunds.md"  # relative to the folder ingested, not the server's path
    assert "refund" in top["content"].lower()
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    parent = top["parent"]
    assert parent["key"].startswith("refunds.md#p") and top["content"][:40] in parent["content"]
    assert parent["parentId"] == f"support/docs/{parent['key']}" and len(parent["summary"]) <= 301
    prov = top["provenance"]
    assert (prov["tenant"], prov["trustTier"], prov["mode"], prov["route"]) == ("acme", "FIRST_PARTY", "HYBRID", "explicit:support/docs")
    assert {s["signal"] for s in prov["scores"]} <= {"dense", "sparse"} and prov["scores"]
    assert prov["fusedScore"] == top["score"] and len(prov["contentHash"]) == 64
    assert prov["ingestedAt"] and prov["updatedAt"]


def test_trace_lists_route_then_retrieval_with_bounded_previews(gateway):
    trace = gateway.data(SEARCH, {"q": "refund " * 200, "collection": "docs", "limit": 10})["search"]["trace"]
    assert len(trace["traceId"]) == 32 and trace["durationMs"] > 0
    route, retrieve = trace["stages"]
    assert (route["name"], route["phase"], route["status"]) == ("route", "ROUTE", "OK")
    assert route["detail"]["routes"] == ["support/docs"]
    assert retrieve["phase"] == "RETRIEVE" and retrieve["outputCount"] >= 1
    assert len(retrieve["preview"]) <= 5
    assert all(len(p) <= 200 + 40 for p in retrieve["preview"])


def test_modes_fusions_threshold_and_filters(gateway):
    for mode in ("DENSE", "SPARSE", "HYBRID"):
        hits = gateway.data(SEARCH, {"q": "status page during an outage", "collection": "docs", "mode": mode})["search"]["hits"]
        assert hits[0]["chunk"]["sourceId"] == "outages-and-status-page.md", mode
        assert hits[0]["provenance"]["mode"] == mode
    for fusion in ("RRF", "DBSF", "WEIGHTED"):
        assert gateway.data(SEARCH, {"q": "encryption keys", "collection": "docs", "fusion": fusion,
                                     "alpha": 0.5})["search"]["hits"]
    assert gateway.data(SEARCH, {"q": "encryption", "collection": "docs", "mode": "DENSE",
                                 "threshold": 0.99})["search"]["hits"] == []
    hits = gateway.data(SEARCH, {"q": "refund", "collection": "tickets", "limit": 10,
                                 "filter": {"and": [{"field": "metadata.status", "op": "EQ", "value": "closed"},
                                                    {"field": "metadata.year", "op": "GTE", "value": 2025}]}})["search"]["hits"]
    assert hits and all(h["chunk"]["metadata"]["status"] == "closed" and h["chunk"]["metadata"]["year"] >= 2025 for h in hits)


def test_context_renders_prompt_block(gateway):
    data = gateway.data('{ context(input: {query: "API rate limits", collection: "docs", limit: 2}) { text hits { chunk { sourceId chunkId } score } } }')
    lines = data["context"]["text"].splitlines()
    assert lines[0] == "## Retrieved Context (API rate limits)"
    assert len(lines) - 1 == len(data["context"]["hits"]) == 2
    for rank, (line, hit) in enumerate(zip(lines[1:], data["context"]["hits"]), start=1):
        assert line.startswith(f"- [{hit['chunk']['sourceId']}/{hit['chunk']['chunkId']}] (support/docs · rank {rank} · "
                               f"score {hit['score']:.3g}) ")
    assert lines[1].split(" · score ")[1].split(")")[0] != lines[2].split(" · score ")[1].split(")")[0]


def test_context_with_a_budget_and_without_evidence(gateway):
    block = gateway.data('{ context(input: {query: "API rate limits", collection: "docs", limit: 3}, maxChars: 300) '
                         '{ text leftOut shortened hits { score } } }')["context"]
    assert len(block["text"]) <= 300 and block["leftOut"] + block["shortened"] >= 1
    assert len(block["text"].splitlines()) - 1 - (block["leftOut"] > 0) == 3 - block["leftOut"]
    refused = gateway.error('{ context(input: {query: "API rate limits", collection: "docs"}, maxChars: 1) { text } }')
    assert refused["extensions"]["code"] == "INVALID_INPUT" and "maxChars is 1; it must be at least 64" in refused["message"]
    error = gateway.error('{ context(input: {query: "banana bread recipe with walnuts", collection: "docs", '
                          'pipeline: "evidence"}) { text } }')
    assert error["extensions"]["code"] == "NO_EVIDENCE" and "abstained" in error["message"]


def test_collections_and_source(gateway):
    cols = gateway.data("{ collections { namespace name trustTier mode fusion defaultLimit metadataFields chunkCount description } }")
    by_name = {c["name"]: c for c in cols["collections"]}
    assert set(by_name) == {"docs", "tickets"}
    assert by_name["tickets"]["trustTier"] == "USER_GENERATED" and by_name["tickets"]["chunkCount"] >= 15
    assert by_name["tickets"]["metadataFields"] == ["status", "priority", "product", "year"]
    source = gateway.data('{ source(namespace: "support", sourceId: "refunds.md") { collection sourceId title sourcePath chunks { chunkId content contentHash parentKey } } }')["source"]
    assert source["collection"] == "docs" and source["title"] == "Refunds"
    assert [c["chunkId"] for c in source["chunks"]] == [str(i) for i in range(len(source["chunks"]))]


def test_parents_are_batched_not_n_plus_one(gateway):
    gateway.spans.clear()
    result = gateway.data(SEARCH, {"q": "storage", "collection": "docs", "limit": 8})["search"]
    hits = result["hits"]
    assert len(hits) == 8 and all(h["parent"] for h in hits)
    loads = [s for s in request_spans(gateway, result["trace"]["traceId"]) if s.name == "gateway.parents.load"]
    assert len(loads) == 1  # one batched lookup for all 8 hits
    assert loads[0].attributes["gateway.input_count"] == len({h["parent"]["key"] for h in hits})


def request_spans(gateway, trace_id: str, timeout: float = 5.0):
    """Every span of one trace, once its request span has ended (after the last byte is sent)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = [s for s in gateway.spans.get_finished_spans() if format(s.context.trace_id, "032x") == trace_id]
        if any(s.name == "graphql.request" for s in spans):
            return spans
        time.sleep(0.01)
    raise AssertionError(f"the graphql.request span of trace {trace_id} never finished")


def test_spans_carry_counts_not_text(gateway):
    gateway.spans.clear()
    secret = "zebra-unicorn-secret-query"
    data = gateway.data(SEARCH, {"q": secret, "collection": "docs"})
    spans = request_spans(gateway, data["search"]["trace"]["traceId"])  # traceId is the OpenTelemetry trace id
    assert {s.name for s in spans} >= {"graphql.request", "gateway.route.route", "gateway.retrieve.retrieve:support/docs"}
    for span in spans:
        for value in span.attributes.values():
            assert secret not in str(value)
            assert "refund" not in str(value).lower()


PAGE = """
query($input: SearchInput!, $first: Int, $after: String) {
  search(input: $input, first: $first, after: $after) {
    hits { rank score chunk { id sourceId chunkId } }
    groups { rank score sourceId hits { rank chunk { id } } }
    totalCount pageInfo { hasNextPage hasPreviousPage endCursor }
    trace { stages { name detail } }
  }
}
"""


def test_pages_of_one_search_neither_repeat_nor_skip(gateway):
    query = {"query": "storage encryption and refunds", "collection": "docs", "limit": 9}
    whole = gateway.data(PAGE, {"input": query})["search"]
    assert whole["totalCount"] == len(whole["hits"]) == 9 and whole["pageInfo"]["hasNextPage"] is False
    assert [h["rank"] for h in whole["hits"]] == list(range(1, 10))
    seen, after, pages = [], None, 0
    while True:
        result = gateway.data(PAGE, {"input": query, "first": 4, "after": after})["search"]
        assert result["pageInfo"]["hasPreviousPage"] is (after is not None)
        seen.extend((h["rank"], h["chunk"]["id"], h["score"]) for h in result["hits"])
        pages += 1
        if not result["pageInfo"]["hasNextPage"]:
            break
        after = result["pageInfo"]["endCursor"]
    assert pages == 3 and seen == [(h["rank"], h["chunk"]["id"], h["score"]) for h in whole["hits"]]


def test_a_cursor_of_another_search_or_tenant_is_a_typed_error(gateway):
    query = {"query": "refunds", "collection": "docs", "limit": 6}
    cursor = gateway.data(PAGE, {"input": query, "first": 2})["search"]["pageInfo"]["endCursor"]
    other = gateway.error(PAGE, {"input": {**query, "query": "outages"}, "first": 2, "after": cursor})
    assert other["extensions"]["code"] == "INVALID_INPUT" and "cursor of another search" in other["message"]
    # globex has the very same collection names: the cursor still is not its own, and no data comes back.
    body = gateway.post(PAGE, {"input": query, "first": 2, "after": cursor}, key="globex-reader").json()
    assert body["data"] == {"search": None} and body["errors"][0]["extensions"]["code"] == "INVALID_INPUT"
    # A page that does not select pageInfo still has its cursor checked (no cursor is minted for it).
    bare = "query($input: SearchInput!, $after: String) { search(input: $input, first: 2, after: $after) { hits { rank } } }"
    assert [h["rank"] for h in gateway.data(bare, {"input": query, "after": cursor})["search"]["hits"]] == [3, 4]
    assert gateway.error(bare, {"input": {**query, "query": "outages"}, "after": cursor})["extensions"]["code"] \
        == "INVALID_INPUT"
    forged = gateway.error(PAGE, {"input": query, "first": 2, "after": cursor[:-2] + "xx"})
    assert forged["extensions"]["code"] == "INVALID_INPUT" and "after '" in forged["message"]
    too_many = gateway.error(PAGE, {"input": query, "first": 101})
    assert too_many["extensions"]["code"] == "INVALID_INPUT" and "allowed: 1 to 100" in too_many["message"]


def test_autocut_cuts_the_tail_at_a_score_jump(gateway):
    query = {"query": "How do I get a refund?", "collection": "docs", "mode": "DENSE", "limit": 20}
    full = gateway.data(PAGE, {"input": query})["search"]
    cut = gateway.data(PAGE, {"input": {**query, "autocut": 1}})["search"]
    assert 1 <= cut["totalCount"] < full["totalCount"]
    assert [h["chunk"]["id"] for h in cut["hits"]] == [h["chunk"]["id"] for h in full["hits"][:cut["totalCount"]]]
    shape = next(s for s in cut["trace"]["stages"] if s["name"] == "shape")
    assert shape["detail"]["autocut"] == 1
    bad = gateway.error(PAGE, {"input": {**query, "autocut": 0}})
    assert bad["extensions"]["code"] == "INVALID_INPUT" and "allowed: 1 to 10" in bad["message"]


def test_group_by_source_pages_over_groups(gateway):
    query = {"query": "refund", "collection": "docs", "limit": 30, "groupBy": "SOURCE", "hitsPerGroup": 2}
    whole = gateway.data(PAGE, {"input": query})["search"]
    groups = whole["groups"]
    assert whole["totalCount"] == len(groups) >= 3
    assert len({g["sourceId"] for g in groups}) == len(groups)
    assert all(1 <= len(g["hits"]) <= 2 for g in groups)
    assert [g["score"] for g in groups] == sorted((g["score"] for g in groups), reverse=True)
    assert [h["chunk"]["id"] for h in whole["hits"]] == [h["chunk"]["id"] for g in groups for h in g["hits"]]
    first = gateway.data(PAGE, {"input": query, "first": 2})["search"]
    assert [g["sourceId"] for g in first["groups"]] == [g["sourceId"] for g in groups[:2]]
    assert gateway.data(PAGE, {"input": {**query, "groupBy": None, "hitsPerGroup": None}})["search"]["groups"] is None


UPSERT = """mutation($c: String!, $docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "support", collection: $c, documents: $docs) { chunkIds } }"""


def test_one_source_id_in_two_collections_is_two_chunks(gateway):
    texts = {"docs": "Zeppelin mooring fees are refunded within a week.",
             "tickets": "Zeppelin mooring ticket: the customer asks about fees."}
    for collection, text in texts.items():
        gateway.data(UPSERT, {"c": collection, "docs": [{"sourceId": "zeppelin.md", "text": text}]}, key="acme-writer")
    try:
        hits = gateway.data(PAGE, {"input": {"query": "zeppelin mooring fees", "collections": ["docs", "tickets"],
                                             "limit": 10}})["search"]["hits"]
        ours = {h["chunk"]["id"] for h in hits if h["chunk"]["sourceId"] == "zeppelin.md"}
        assert ours == {"support/docs/zeppelin.md/0", "support/tickets/zeppelin.md/0"}
    finally:
        for collection in texts:
            gateway.data('mutation($c: String!) { deleteSource(namespace: "support", collection: $c, '
                         'sourceId: "zeppelin.md") { chunkIds } }', {"c": collection}, key="acme-writer")


def test_the_first_search_of_an_inactive_collection_says_it_was_loaded_again(gateway):
    query = {"q": "How do I get a refund?", "collection": "docs", "limit": 3}
    before = gateway.data(SEARCH, query)["search"]
    store = gateway.app.state.gateway.store
    assert store.release_idle(0)  # as the idle sweep does after GATEWAY_TENANT_IDLE_S
    after = gateway.data(SEARCH, query)["search"]
    assert [h["chunk"]["id"] for h in after["hits"]] == [h["chunk"]["id"] for h in before["hits"]]
    assert [w for w in after["trace"]["warnings"] if "inactive" in w] == [
        w for w in after["trace"]["warnings"] if w.startswith("collection support/docs was inactive: it was loaded")]
    assert any("inactive" in w for w in after["trace"]["warnings"])
    again = gateway.data(SEARCH, query)["search"]
    assert not any("inactive" in w for w in again["trace"]["warnings"])


def test_text_presence_and_date_filters_and_their_errors(gateway):
    def hits(collection, node, q="refund"):
        return gateway.data(SEARCH, {"q": q, "collection": collection, "limit": 10, "filter": node})["search"]["hits"]

    titled = hits("docs", {"field": "title", "op": "PREFIX", "value": "Ref"})
    assert titled and all(h["chunk"]["title"].startswith("Ref") for h in titled)
    assert hits("docs", {"field": "title", "op": "CONTAINS", "value": "%"}) == []  # a literal %, in no title
    with_status = hits("tickets", {"field": "metadata.status", "op": "EXISTS", "value": True})
    assert with_status and all("status" in h["chunk"]["metadata"] for h in with_status)
    assert hits("tickets", {"field": "metadata.status", "op": "IS_NULL", "value": True}) == []
    assert hits("docs", {"field": "updated_at", "op": "GTE", "value": "2000-01-01"})
    assert hits("docs", {"field": "updated_at", "op": "LT", "value": "2000-01-01T00:00:00+01:00"}) == []
    error = gateway.error(SEARCH, {"q": "refund", "collection": "docs",
                                   "filter": {"field": "created_at", "op": "CONTAINS", "value": "1"}})
    assert error["extensions"]["code"] == "INVALID_FILTER"
    assert error["message"] == ("operator 'contains' does not apply to 'created_at' (a time field); allowed on it: "
                                "eq, gt, gte, in, lt, lte, ne, nin")
    collections = gateway.data("{ collections { name language } }")["collections"]
    assert {c["language"] for c in collections} == {"en"}
