import json

from gateway.admission.cost import CROSS_ENCODER_PER_HIT_256, SearchShape, TenantCostModel
from gateway.grounding.support import MAX_CHECKS
from gateway.graphql.cost import UNPARSED, estimate, filter_values, request_payload
from gateway.graphql.documents import document_cache
from gateway.tenancy.config import TenantConfig

TENANT = TenantConfig.model_validate({"id": "t", "namespaces": {"ns": {"collections": {
    "docs": {"trust_tier": "first-party", "limit": 10, "candidates": 50}}}}})
MODEL = TenantCostModel(TENANT)
DOCUMENTS = document_cache(max_tokens=2000, max_depth=10, max_aliases=15)
ONE = MODEL.search(SearchShape())


def cost(query: str, variables: dict | None = None, name: str | None = None) -> int:
    return estimate({"query": query, "variables": variables, "operationName": name}, MODEL, DOCUMENTS).cost


def test_each_alias_and_fragment_spread_is_a_search_of_its_own():
    assert cost('{ search(input: {query: "a"}) { hits { content } } }') == ONE
    aliased = "{ " + " ".join(f'a{i}: search(input: {{query: "a"}}) {{ hits {{ content }} }}' for i in range(15)) + " }"
    assert cost(aliased) == 15 * ONE
    fragments = ('query { ...S ...T } fragment S on Query { search(input: {query: "a"}) { hits { content } } } '
                 'fragment T on Query { ... on Query { context(input: {query: "b"}) { text } } }')
    assert cost(fragments) == 2 * ONE


def test_arguments_come_from_literals_or_variables():
    literal = cost('{ search(input: {query: "a", limit: 100}) { hits { content } } }')
    variable = cost('query($n: Int) { search(input: {query: "a", limit: $n}) { hits { content } } }', {"n": 100})
    assert literal == variable == MODEL.search(SearchShape(limit=100))
    nin = {"field": "metadata.year", "op": "nin", "value": list(range(1024))}
    filtered = cost('query($f: FilterInput) { search(input: {query: "a", filter: $f}) { hits { content } } }',
                    {"f": {"and": [nin, nin]}})
    assert filtered == MODEL.search(SearchShape(filter_values=2 * 1025))


def test_hits_without_content_cost_less_than_hits_with_parents():
    bare = cost('{ search(input: {query: "a"}) { hits { chunk { id } } } }')
    parents = cost('{ search(input: {query: "a"}) { hits { content parent { content } } } }')
    assert bare < ONE < parents


def test_facets_cost_a_retrieval_at_their_depth():
    from gateway.admission.cost import SearchShape as Shape

    plain = cost('{ search(input: {query: "a", collection: "docs"}) { hits { content } } }')
    faceted = cost('{ search(input: {query: "a", collection: "docs", facets: [{field: "source_id"}]}) '
                   '{ hits { content } facets { counted } } }')
    deep = cost('query($d: Int) { search(input: {query: "a", collection: "docs", facets: [{field: "source_id"}], '
                'facetDepth: $d}) { hits { content } } }', {"d": 1000})
    # One collection, hybrid (the default mode): 2 signals x the depth (200 by default).
    assert faceted - plain == 2 * 200 and deep - plain == 2 * 1000
    assert MODEL.search(Shape(named_collection=True, facet_depth=1000)) == deep


def test_highlights_cost_up_to_eight_embedded_sentences_a_highlighted_hit():
    from gateway.admission.cost import HIGHLIGHT_SENTENCE

    plain = cost('{ search(input: {query: "a"}) { hits { content } } }')
    marked = cost('{ search(input: {query: "a"}) { hits { content highlights { spans { start } } } } }')
    page = cost('{ search(input: {query: "a"}, first: 3) { hits { content highlights { spans { start } } } } }')
    context = cost('{ context(input: {query: "a", limit: 4}) { hits { highlights { sentence { text } } } } }')
    # Every hit of the limit (10) when not paged; the page's hits with `first`.
    assert marked - plain == 10 * 8 * HIGHLIGHT_SENTENCE and page - plain == 3 * 8 * HIGHLIGHT_SENTENCE
    assert context - cost('{ context(input: {query: "a", limit: 4}) { text } }') == 4 * 8 * HIGHLIGHT_SENTENCE

def test_operation_label_is_bounded_and_the_client_name_kept():
    result = estimate({"query": "query Mine { collections { name } bogus }", "operationName": "Mine"}, MODEL, DOCUMENTS)
    assert (result.operation, result.name) == ("query:collections+other", "Mine")


def test_unparseable_requests_cost_one_and_are_left_to_strawberry():
    assert estimate({"query": "{ search("}, MODEL, DOCUMENTS) is UNPARSED
    assert estimate(None, MODEL, DOCUMENTS) is UNPARSED
    assert estimate({"query": "query A { collections { name } } query B { collections { name } }"},
                    MODEL, DOCUMENTS) is UNPARSED  # which one to run is for validation to say


def test_request_payload_reads_post_bodies_and_get_parameters():
    body = json.dumps({"query": "{ collections { name } }", "variables": {"x": 1}}).encode()
    assert request_payload("POST", body, {})["variables"] == {"x": 1}
    assert request_payload("POST", b'"a string"', {}) is None
    assert request_payload("POST", b"[" * 100_000, {}) is None
    got = request_payload("GET", b"", {"query": "{ a }", "variables": '{"y": 2}'})
    assert got == {"query": "{ a }", "operationName": None, "variables": {"y": 2}}


def test_filter_values_count_deep_nesting_without_recursion():
    node: dict = {"field": "title", "op": "eq", "value": "x"}
    for _ in range(5000):
        node = {"not": node}
    assert filter_values(node) == 1
    assert filter_values({"or": [{"field": "a", "op": "in", "value": [1, 2, 3]}, {"field": "b", "op": "eq"}]}) == 5


def test_a_conversation_turn_adds_its_reads_writes_and_model_call():
    from gateway.admission.cost import LLM_CALL
    from gateway.conversations.followup import CLARITY_PASSAGES
    from gateway.conversations.service import CLARITY_EMBEDDING, RELATIVE_EMBEDDINGS, relevance_cost
    from gateway.conversations.followup import DEFAULT_RULES
    from gateway.tenancy.config import ConversationConfig

    with_turn = cost('query($c: String) { search(input: {query: "a", conversationId: $c}) { hits { content } } }', {"c": "c1"})
    # The search, the follow-up's own words searched too (the relative topic check, Rules.relative), the
    # previous turn's first hits read and embedded, and its own and the resolved query's first hits
    # embedded when they carry no dense signal, the cross-encoder's pairs (its own words against its own
    # and the previous turn's first hits), the turns read, the write.
    topic_check = RELATIVE_EMBEDDINGS * CLARITY_EMBEDDING + CLARITY_PASSAGES + relevance_cost(DEFAULT_RULES)
    assert relevance_cost(DEFAULT_RULES) > 0
    assert with_turn == ONE + ONE + topic_check + 4 * 20 + 20
    assert cost('{ search(input: {query: "a"}) { hits { content } } }') == ONE  # no conversation: unchanged
    # A turn without a cue ("when do the bins get emptied then?") is judged too (Rules.standalone_margin):
    # the same charge as a would-be follow-up's, its glued search, reads and cross-encoder pairs included.
    assert DEFAULT_RULES.standalone_margin is not None
    plain = cost('{ search(input: {query: "when do the bins get emptied then?"}) { hits { content } } }')
    judged = cost('{ search(input: {query: "when do the bins get emptied then?", conversationId: "c1"}) '
                  '{ hits { content } } }')
    assert judged == plain + plain + topic_check + 4 * 20 + 20
    llm = ConversationConfig(resolve="llm", max_turns=5)
    query = {"query": '{ search(input: {query: "a", conversationId: "c1"}) { hits { content } } }'}
    assert estimate(query, MODEL, DOCUMENTS, llm).cost == ONE + ONE + topic_check + 4 * 5 + 20 + LLM_CALL
    off = ConversationConfig(resolve="off")
    assert estimate(query, MODEL, DOCUMENTS, off).cost == ONE + 4 * 20 + 20
    assert cost('{ conversation(id: "c1") { turns { query } } }') == 1 + 4 * 20
    assert estimate({"query": 'mutation { clearConversation(id: "c1") { turnsDeleted } }'}, MODEL, DOCUMENTS).operation \
        == "mutation:clearConversation"


def test_add_memory_costs_like_a_one_document_upsert():
    query = 'mutation { addMemory(namespace: "a", collection: "m", content: "%s", userId: "u", memoryType: "t") { id } }'
    assert cost(query % ("x" * 1000)) == MODEL.upsert(1, 1000)


def test_an_ingest_job_costs_like_an_upsert_of_its_documents_and_files():
    query = ('mutation($d: [DocumentInput!], $f: [FileInput!]) { startIngestJob(namespace: "a", collection: "c", '
             'documents: $d, files: $f) { id } }')
    variables = {"d": [{"sourceId": "1", "text": "x" * 2000}], "f": [{"name": "a.pdf", "contentBase64": "A" * 4000}]}
    assert cost(query, variables) == MODEL.upsert(2, 2000 + 3000)


def test_every_root_field_of_the_schema_has_its_own_metric_label():
    from gateway.graphql.cost import ROOT_FIELDS
    from gateway.graphql.schema import build_schema
    from gateway.settings import Settings

    schema = build_schema(Settings())._schema
    roots = {*schema.query_type.fields, *schema.mutation_type.fields}
    assert roots <= ROOT_FIELDS, sorted(roots - ROOT_FIELDS)


def test_validate_citations_counts_its_support_checks_and_stored_reads():
    query = 'query($a: String!, $s: Boolean) { validateCitations(answer: $a, evidence: [], support: $s) { valid } }'
    three = "A [a/0]. B [b/0] [a/0]. C [c/1]."
    assert cost(query, {"a": three}) == MODEL.citations(4, 0) == 1 + 4 * CROSS_ENCODER_PER_HIT_256
    assert cost(query, {"a": three, "s": False}) == MODEL.citations(0, 0) == 1
    many = " ".join(f"F [s{i}/0]." for i in range(40))
    assert cost(query, {"a": many}) == MODEL.citations(MAX_CHECKS, 0)
    stored = 'query($a: String!) { validateCitations(answer: $a, stored: {namespace: "ns"}) { valid } }'
    assert cost(stored, {"a": three}) == MODEL.citations(4, 3) == 1 + 4 * CROSS_ENCODER_PER_HIT_256 + 3 * MODEL.source()


def test_link_names_pays_a_search_per_name_of_the_tenants_sources_and_inferred_edges_a_read():
    from gateway.graphql.cost import HITS_PER_NAME
    from gateway.retrieval.options import Mode

    answer = "Keys live in Acme Vault and SSO. Contact Acme Support."  # 3 names, the last starts a sentence
    query = 'query($a: String!, $s: StoredEvidenceInput, $p: [PassageInput!]) { linkNames(answer: $a, sources: $s, passages: $p) { name } }'
    search = MODEL.search(SearchShape(limit=HITS_PER_NAME, mode=Mode.SPARSE))
    assert cost(query, {"a": answer, "s": {"namespace": "ns"}}) == 1 + 4 * search
    named = MODEL.search(SearchShape(limit=HITS_PER_NAME, mode=Mode.SPARSE, named_collection=True))
    assert cost(query, {"a": answer, "s": {"namespace": "ns", "collection": "docs"}}) == 1 + 4 * named
    passages = [{"sourceId": "s", "chunkId": str(i), "content": "x"} for i in range(20)]
    assert cost(query, {"a": answer, "p": passages}) == 1 + 3 * 20 // 10
    assert cost('{ inferredEdges(namespace: "ns", collection: "docs", sourceId: "s") { enabled } }') == MODEL.source()


def test_an_operation_costs_the_same_from_its_cached_plan_as_computed_afresh():
    """The plan (root fields, what their hits select, the label) is kept with the document; the
    arguments are read from each request's variables."""
    text = ('query Find($n: Int, $mode: SearchMode, $c: [String!]) { ...S '
            'context(input: {query: "b", limit: $n}) { text } } '
            'fragment S on Query { search(input: {query: "a", limit: $n, mode: $mode, collections: $c}) '
            '{ hits { content parent { content } } } }')
    warm = document_cache(max_tokens=2000, max_depth=10, max_aliases=15)
    for variables in ({"n": 5}, {"n": 100, "mode": "DENSE"}, {"n": 7, "c": ["x", "y", "z"]}, {"n": "many"}, None):
        payload = {"query": text, "variables": variables, "operationName": "Find"}
        fresh = estimate(payload, MODEL, document_cache(max_tokens=2000, max_depth=10, max_aliases=15))
        assert estimate(payload, MODEL, warm) == estimate(payload, MODEL, warm) == fresh
        assert fresh.operation == "query:context+search" and fresh.name == "Find"
    assert len({estimate({"query": text, "variables": {"n": n}}, MODEL, warm).cost for n in (5, 50, 500)}) == 3
    # A name the document does not define is unparsed, and costs as before once asked for properly.
    assert estimate({"query": text, "operationName": "Other"}, MODEL, warm) == UNPARSED
    assert estimate({"query": text, "variables": {"n": 5}}, MODEL, warm) == \
        estimate({"query": text, "variables": {"n": 5}, "operationName": "Find"}, MODEL, warm)
