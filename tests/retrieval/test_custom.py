"""Custom retrievers through the real Searcher: stamping, isolation, pipelines, routed and federated search."""

import asyncio

import pytest

from gateway.errors import ConfigError, InvalidFilter, UpstreamUnavailable
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.routing.searcher import Searcher, SearchRequest
from gateway.settings import Settings
from gateway.storage.filters import And, Condition, Op
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry

FAQ = "tests.retrieval.faq_retriever"
TENANT = {
    "id": "acme",
    "namespaces": {
        "help": {"collections": {
            "docs": {"trust_tier": "first-party"},
            "faq": {"trust_tier": "partner", "retriever": f"{FAQ}:lookup"},
            "faqasync": {"trust_tier": "partner", "retriever": f"{FAQ}:lookup_async"},
            "faqheld": {"trust_tier": "partner", "retriever": f"{FAQ}:recording", "metadata_fields": ["lang"],
                        "search": {"filter": {"field": "metadata.lang", "op": "eq", "value": "en"}}},
            "faqplain": {"trust_tier": "partner", "retriever": f"{FAQ}:recording"}}},
        "odd": {"collections": {
            "leaky": {"trust_tier": "third-party", "retriever": f"{FAQ}:leaky"},
            "broken": {"trust_tier": "third-party", "retriever": f"{FAQ}:broken"},
            "nonsense": {"trust_tier": "third-party", "retriever": f"{FAQ}:nonsense"}}},
    },
    "pipelines": {"top": {"stages": [{"diversify": {"limit": 1}}]}},
    "federation": {"merge": "signals", "timeout_ms": 20000},
}
ME = Principal("acme", Role.READER)


@pytest.fixture(scope="module")
def searcher(lite_store, embedder):
    registry = TenantRegistry({"acme": TenantConfig.model_validate(TENANT)})
    docs = registry.resolve("acme", "docs", namespace="help")
    lite_store.drop(docs.scope)
    ingest_documents(lite_store, embedder, docs, [
        Document("passwords", "Passwords can be reset from the sign-in page with an emailed link.", title="Passwords"),
        Document("billing", "Invoices are sent on the first day of each month.", title="Billing")], progress=False)
    return Searcher(registry, lite_store, embedder, Settings())


def search(searcher, **request):
    return asyncio.run(searcher.search(ME, SearchRequest(**request)))


@pytest.mark.parametrize("collection", ["faq", "faqasync"])
def test_custom_hits_are_stamped_like_milvus_hits(searcher, collection):
    result = search(searcher, query="reset password", collection=collection)
    hit = result.hits[0]
    assert (hit.source_id, hit.namespace, hit.collection) == ("faq/reset-password", "help", collection)
    p = hit.provenance
    assert (p.tenant, p.namespace, p.collection, p.trust_tier) == ("acme", "help", collection, "partner")
    assert p.retriever == f"custom:{FAQ}:{'lookup' if collection == 'faq' else 'lookup_async'}"
    assert p.route == f"explicit:help/{collection}" and p.content_hash
    assert [(s.signal, s.rank) for s in p.scores] == [(f"custom:help/{collection}", 1)]
    stage = next(s for s in result.trace.stages if s.name == f"retrieve:help/{collection}")
    assert stage.output_count == len(result.hits) and "faq/reset-password" in stage.preview[0]


def test_chunks_claiming_another_tenant_namespace_or_collection_are_dropped_and_reported(searcher):
    result = search(searcher, query="passwords", collection="leaky")
    assert [h.source_id for h in result.hits] == ["mine"]
    assert {h.provenance.tenant for h in result.hits} == {"acme"}
    assert any("returned 3 chunk(s) claiming another tenant" in w for w in result.trace.warnings)


def test_a_pipeline_runs_on_custom_hits(searcher):
    result = search(searcher, query="reset password export data", collection="faq", pipeline="top")
    assert len(result.hits) == 1
    assert [s.name for s in result.trace.stages][-1] == "diversify"


def test_federated_search_merges_custom_and_milvus_collections(searcher):
    result = search(searcher, query="reset password", namespace="help", federated=True)
    by_collection = {h.collection for h in result.hits}
    assert {"docs", "faq", "faqasync"} <= by_collection
    assert all(h.provenance.retriever == "federated" and h.provenance.tenant == "acme" for h in result.hits)
    # Calibrated, not raw: faqasync scores 100 times higher than faq, and yet each custom
    # collection's best hit reaches the same normalised score, 1.
    best = {c: max(h.score for h in result.hits if h.collection == c) for c in by_collection}
    assert best["faq"] == best["faqasync"] == best["docs"] == pytest.approx(1.0)
    assert {h.collection for h in result.hits[:3]} == {"docs", "faq", "faqasync"}


def test_a_failing_retriever_is_upstream_unavailable_and_a_partial_failure_when_federated(searcher):
    with pytest.raises(UpstreamUnavailable, match="custom retriever 'tests.retrieval.faq_retriever:broken' of "
                                                  "collection 'odd/broken' failed \\(RuntimeError\\)"):
        search(searcher, query="anything", collection="broken")
    with pytest.raises(UpstreamUnavailable, match="returned str; it must return a list of RetrievedChunk"):
        search(searcher, query="anything", collection="nonsense")
    result = search(searcher, query="passwords", namespace="odd", federated=True)
    assert [h.source_id for h in result.hits] == ["mine"]
    assert {(f.collection, f.code) for f in result.failures} == {("odd/broken", "UPSTREAM_UNAVAILABLE"),
                                                                 ("odd/nonsense", "UPSTREAM_UNAVAILABLE")}


def test_a_custom_retriever_receives_the_filter_with_the_collections_default_regression():
    # Was INVALID_FILTER ("takes no filter"): the function now gets the request's filter ANDed with
    # the collection's search.filter, as a tree and as the expression Milvus would run.
    from tests.retrieval.faq_retriever import SEEN

    registry = TenantRegistry({"acme": TenantConfig.model_validate(TENANT)})
    searcher = Searcher(registry, None, None, Settings())  # type: ignore[arg-type]
    SEEN.clear()
    result = search(searcher, query="reset password", collection="faqheld", namespace="help",
                    filter=Condition("title", Op.PREFIX, "How"))
    assert result.hits and result.hits[0].source_id == "faq/reset-password"
    asked = SEEN[-1]
    assert asked.filter == And((Condition("title", Op.PREFIX, "How"), Condition("metadata.lang", Op.EQ, "en")))
    assert asked.where == '(title like "How%") and (metadata["lang"] == "en")'
    stage = next(s for s in result.trace.stages if s.name == "retrieve:help/faqheld")
    assert stage.detail["defaultFilters"] == {"help/faqheld": 'metadata["lang"] == "en"'}
    search(searcher, query="reset password", collection="faqheld", namespace="help")
    assert (SEEN[-1].filter, SEEN[-1].where) == (Condition("metadata.lang", Op.EQ, "en"), 'metadata["lang"] == "en"')
    search(searcher, query="reset password", collection="faqplain", namespace="help")
    assert (SEEN[-1].filter, SEEN[-1].where) == (None, None)


def test_a_filter_on_a_custom_collection_is_checked_like_a_milvus_collections(searcher):
    with pytest.raises(InvalidFilter, match="^filter field 'year' is not filterable here; allowed: "):
        search(searcher, query="reset", collection="faq", filter=Condition("year", Op.EQ, 2024))
    with pytest.raises(InvalidFilter, match=r"^operator 'exists' does not apply to 'title' \(a text field\)"):
        search(searcher, query="reset", collection="faq", filter=Condition("title", Op.EXISTS, True))


def test_a_retriever_that_cannot_be_imported_or_called_stops_start_up(lite_store, embedder):
    for spec, message in [("tests.retrieval.nowhere:lookup", "cannot import module 'tests.retrieval.nowhere'"),
                          (f"{FAQ}:missing", "is not a callable"),
                          (f"{FAQ}:wrong_arity", "must accept \\(request\\)")]:
        tenant = {"id": "acme", "namespaces": {"help": {"collections": {
            "faq": {"trust_tier": "partner", "retriever": spec}}}}}
        registry = TenantRegistry({"acme": TenantConfig.model_validate(tenant)})
        with pytest.raises(ConfigError, match=message):
            Searcher(registry, lite_store, embedder, Settings())


def test_a_search_by_vector_alone_is_refused_by_a_custom_collection_and_runs_textless_pipelines(searcher, embedder):
    import numpy as np

    from gateway.errors import InvalidInput

    vector = np.asarray(embedder.embed_query("reset my password"), dtype=np.float32)
    with pytest.raises(InvalidInput, match="custom retriever .* takes text only; send `query`"):
        search(searcher, query="", vector=vector, collection="faq")
    # Beside a text, the custom collection gets the text as before.
    assert search(searcher, query="reset password", vector=vector, collection="faq").hits
    # A vector alone on a Milvus collection, through a pipeline whose stage reads no text (diversify).
    result = search(searcher, query="", vector=vector, collection="docs", pipeline="top")
    assert [h.source_id for h in result.hits] == ["passwords"]
