"""A custom retriever (the in-memory FAQ of docs/agents.md) through GraphQL on a served gateway."""

import httpx
import pytest

from gateway.settings import Settings
from tests.hooks.subscribers import SEEN
from tests.serving import serve

KEY = "demo-initech-reader"
TENANT = """
id: initech
api_keys:
  - {sha256: "ed349a65fffb8005b03529b82d8cc2b08677868bea79b66b3b3c624cc4613611", role: reader}
namespaces:
  help:
    collections:
      faq:
        trust_tier: partner
        description: The public FAQ, answered from memory by a Python function
        retriever: "tests.retrieval.faq_retriever:lookup"
        tool_prefix: faq
      mirror: {trust_tier: third-party, retriever: "tests.retrieval.faq_retriever:lookup_async"}
      held:
        trust_tier: partner
        retriever: "tests.retrieval.faq_retriever:recording"
        metadata_fields: [lang]
        search: {filter: {field: metadata.lang, op: eq, value: de}}
      leaky: {trust_tier: third-party, retriever: "tests.retrieval.faq_retriever:leaky"}
router:
  rules:
    - keyword: {routes: {help/leaky: [leak]}}
  default: faq
pipelines:
  short:
    stages:
      - rerank: {merge: roundRobin, chain: [{score: {field: score, blend: replace}}]}
      - diversify: {limit: 2}
hooks:
  subscribers: ["tests.hooks.subscribers:record_acme"]
"""
HITS = "hits { chunk { sourceId collection } content provenance { tenant namespace collection trustTier retriever route scores { signal rank } } }"


@pytest.fixture(scope="module")
def initech(tmp_path_factory):
    directory = tmp_path_factory.mktemp("initech")
    (directory / "tenants").mkdir()
    (directory / "tenants" / "initech.yaml").write_text(TENANT)
    settings = Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=directory / "tenants",
                        ingest_demo_on_start=False)
    with serve(settings) as gateway:
        yield gateway


def test_routed_search_returns_stamped_custom_hits(initech):
    data = initech.data(f'{{ search(input: {{query: "how do I reset my password"}}) {{ {HITS} trace {{ stages {{ name }} }} }} }}',
                        key=KEY)["search"]
    hit = data["hits"][0]
    assert (hit["chunk"]["sourceId"], hit["chunk"]["collection"]) == ("faq/reset-password", "faq")
    assert hit["provenance"] == {"tenant": "initech", "namespace": "help", "collection": "faq",
                                 "trustTier": "PARTNER", "retriever": "custom:tests.retrieval.faq_retriever:lookup",
                                 "route": "default:help/faq", "scores": [{"signal": "custom:help/faq", "rank": 1}]}
    assert [s["name"] for s in data["trace"]["stages"]] == ["route", "retrieve:help/faq"]


def test_federated_search_and_a_pipeline_over_custom_collections(initech):
    data = initech.data(f'{{ search(input: {{query: "export my data", collections: ["faq", "mirror"], pipeline: "short"}}) '
                        f'{{ {HITS} }} }}', key=KEY)["search"]
    assert {h["chunk"]["collection"] for h in data["hits"]} <= {"faq", "mirror"} and len(data["hits"]) == 2
    assert all(h["provenance"]["retriever"] == "federated" for h in data["hits"])


def test_foreign_chunks_never_reach_the_client_and_the_trace_says_so(initech):
    data = initech.data(f'{{ search(input: {{query: "leak passwords"}}) {{ {HITS} trace {{ warnings }} }} }}', key=KEY)["search"]
    assert [h["chunk"]["sourceId"] for h in data["hits"]] == ["mine"]
    assert any("claiming another tenant" in w for w in data["trace"]["warnings"])


def test_context_cites_custom_hits_and_filters_reach_the_function_checked(initech):
    from tests.retrieval.faq_retriever import SEEN as ASKED

    text = initech.data('{ context(input: {query: "delete my account", collection: "faq", limit: 1}) { text } }',
                        key=KEY)["context"]["text"]
    assert text.startswith("## Retrieved Context (delete my account)") and "[faq/delete-account/0]" in text
    error = initech.error('{ search(input: {query: "reset", collection: "faq", '
                          'filter: {field: "metadata.year", op: EQ, value: 2024}}) { hits { chunk { sourceId } } } }', key=KEY)
    assert error["extensions"]["code"] == "INVALID_FILTER" and "'metadata.year' is not filterable here" in error["message"]
    data = initech.data('{ search(input: {query: "reset password", collection: "held", filter: {field: "title", '
                        'op: PREFIX, value: "How"}}) { hits { chunk { sourceId } } '
                        'trace { stages { name detail } } } }', key=KEY)["search"]
    assert data["hits"][0]["chunk"]["sourceId"] == "faq/reset-password"
    assert ASKED[-1].where == '(title like "How%") and (metadata["lang"] == "de")'
    retrieve = next(s for s in data["trace"]["stages"] if s["name"] == "retrieve:help/held")
    assert retrieve["detail"]["defaultFilters"] == {"help/held": 'metadata["lang"] == "de"'}


def test_tool_definitions_offer_search_only_for_a_custom_collection(initech):
    names = [t["function"]["name"] for t in initech.data("{ toolDefinitions }", key=KEY)["toolDefinitions"]]
    assert names == ["search", "getSource", "validateCitations", "faqSearch"]


def test_graphql_searches_reach_the_tenants_subscribers(initech):
    SEEN.clear()
    initech.data('{ search(input: {query: "reset password"}) { hits { chunk { sourceId } } } }', key=KEY)
    state = initech.app.state.gateway
    assert state.searcher.hooks.tenant("initech").flush(10)
    events = [e for e in SEEN["acme"] if e["tenant"] == "initech"]
    assert [e["event"] for e in events][0] == "retrieval:start" and events[-1]["event"] == "retrieval:end"
    metrics = httpx.get(f"{initech.url}/metrics").text
    assert 'gateway_hook_events_total{outcome="delivered",sink="subscribers",tenant="initech"}' in metrics
