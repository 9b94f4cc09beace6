"""Pipelines around routed and federated search, on a real milvus-lite directory and a loopback LLM."""

import asyncio
import json
import time

import pytest

from gateway.errors import ConfigError, UnknownPipeline, UpstreamUnavailable
from gateway.retrieval.trace import StageStatus, TraceRecorder
from gateway.routing.searcher import SearchRequest, Searcher
from gateway.settings import Settings
from gateway.storage.token_vectors import TokenVectorStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.config import Role
from gateway.tenancy.registry import TenantRegistry
from tests.loopback import loopback_server

ME = Principal("acme", Role.READER)


def with_pipelines(tenant_spec, url, **extra):
    spec = {**tenant_spec, "llm": {"base_url": url, "model": "m", "timeout_ms": 300}, **extra}
    spec["pipelines"] = {
        "multi": {"stages": [{"multiQuery": {"count": 2}}]},
        "lenient": {"stages": [{"multiQuery": {"count": 2, "on_error": "skip"}}]},
        "rerank": {"stages": [{"rerank": {"chain": [{"lateInteraction": {"topK": 5}}]}},
                              {"abstain": {"signal": "rerank:lateInteraction", "threshold": 0.3}}]},
    }
    return TenantConfig.model_validate(spec)


def searcher_for(config, lite_store, embedder, tmp_path):
    registry, tokens = TenantRegistry({"acme": config}), TokenVectorStore(lite_store)
    for ref in registry.collections("acme"):
        tokens.drop(ref.scope)  # token vectors live in the shared store: each test starts without them
    return Searcher(registry, lite_store, embedder, Settings(), tokens=tokens, environ={})


def search(searcher, **request):
    return asyncio.run(searcher.search(ME, SearchRequest(**request), TraceRecorder()))


def phrasings(path, body):
    return 200, {"choices": [{"message": {"content": json.dumps({"queries": ["card refund timing",
                                                                            "refund to a closed card"]})}}]}


def test_multi_query_fans_out_and_records_matched_queries(searcher, lite_store, embedder, tenant_spec, tmp_path):
    with loopback_server(phrasings) as (url, seen):
        pipelined = searcher_for(with_pipelines(tenant_spec, url), lite_store, embedder, tmp_path)
        result = search(pipelined, query="refund", collection="docs", pipeline="multi")
    assert len(seen) == 1
    names = [s.name for s in result.trace.stages]
    assert names[:2] == ["route", "multiQuery"] and names[-1] == "fanout"
    assert names.count("retrieve:support/docs") == 3
    assert result.trace.stages[0].detail["pipeline"] == "multi"
    top = result.hits[0]
    assert top.source_id == "refunds" and set(top.provenance.matched_queries) >= {"refund"}
    assert all(m.rank >= 1 for m in top.provenance.query_matches)


def test_federated_search_with_late_interaction_rerank(searcher, lite_store, embedder, tenant_spec, tmp_path):
    with loopback_server(phrasings) as (url, _):
        pipelined = searcher_for(with_pipelines(tenant_spec, url), lite_store, embedder, tmp_path)
        result = search(pipelined, query="refund to the original card", federated=True, pipeline="rerank")
    names = [s.name for s in result.trace.stages]
    assert names == ["route", "federate", "rerank", "abstain"]
    assert {h.collection for h in result.hits} >= {"docs", "tickets"}
    assert all(h.provenance.scores[-1].signal == "rerank:lateInteraction" for h in result.hits)
    assert result.hits[0].source_id in {"refunds", "T-1"}


def test_llm_timeout_skipped_or_failed_by_on_error(searcher, lite_store, embedder, tenant_spec, tmp_path):
    def slow(path, body):
        time.sleep(1.0)
        return phrasings(path, body)

    with loopback_server(slow) as (url, _):
        pipelined = searcher_for(with_pipelines(tenant_spec, url), lite_store, embedder, tmp_path)
        result = search(pipelined, query="refund", collection="docs", pipeline="lenient")
        with pytest.raises(UpstreamUnavailable, match="did not answer within 0.3 s"):
            search(pipelined, query="refund", collection="docs", pipeline="multi")
    stage = result.trace.stages[1]
    assert stage.status is StageStatus.SKIPPED and "did not answer" in stage.warnings[0]
    assert result.hits and result.hits[0].source_id == "refunds"


def test_collection_default_pipeline_and_unknown_pipeline(searcher, lite_store, embedder, tenant_spec, tmp_path):
    spec = json.loads(json.dumps(tenant_spec))
    spec["namespaces"]["support"]["collections"]["docs"]["pipeline"] = "rerank"
    pipelined = searcher_for(with_pipelines(spec, "http://127.0.0.1:9/v1"), lite_store, embedder, tmp_path)
    result = search(pipelined, query="refund", collection="docs")
    assert [s.name for s in result.trace.stages][-2:] == ["rerank", "abstain"]
    with pytest.raises(UnknownPipeline, match=r"pipeline 'deep' is not defined for tenant 'acme'; "
                                              r"known: lenient, multi, rerank"):
        search(pipelined, query="refund", collection="docs", pipeline="deep")


def test_missing_llm_key_fails_at_construction(lite_store, embedder, tenant_spec, tmp_path):
    config = with_pipelines(tenant_spec, "http://127.0.0.1:9/v1")
    config = config.model_copy(update={"llm": config.llm.model_copy(update={"api_key_env": "ACME_LLM_KEY"})})
    with pytest.raises(ConfigError, match=r"reads its API key from \$ACME_LLM_KEY, which is not set"):
        searcher_for(config, lite_store, embedder, tmp_path)


def test_every_hit_stage_in_one_pipeline_on_milvus_lite(searcher, lite_store, embedder, tenant_spec, tmp_path):
    spec = {**tenant_spec, "pipelines": {"all": {"stages": [
        {"rerank": {"chain": [{"lateInteraction": {"topK": 6, "blend": "weighted", "weight": 0.5}},
                              {"score": {"field": "updated_at", "topK": 6, "weight": 0.1}}]}},
        {"abstain": {"signal": "rerank:lateInteraction", "threshold": 0.2}},
        {"parentExpand": {"maxParentChars": 500}},
        {"compress": {"maxCharsPerHit": 60}},
        {"decay": {"field": "updated_at", "halfLifeDays": 365}},
        {"diversify": {"lambda": 0.6, "sourcePenalty": 0.2, "limit": 3}},
        {"custom": {"function": "tests.retrieval.stages.sample_stages:boost_titles", "params": {"factor": 1.0}}},
    ]}}}
    pipelined = searcher_for(TenantConfig.model_validate(spec), lite_store, embedder, tmp_path)
    result = search(pipelined, query="refund to the original card", federated=True, pipeline="all")
    stages = result.trace.stages
    assert [s.name for s in stages] == ["route", "federate", "rerank", "abstain", "parentExpand", "compress",
                                        "decay", "diversify",
                                        "custom:tests.retrieval.stages.sample_stages:boost_titles"]
    assert all(s.status is StageStatus.OK for s in stages)
    assert 1 <= len(result.hits) <= 3 and len({h.source_id for h in result.hits}) == len(result.hits)
    assert all(h.parent is not None and len(h.content) <= 60 for h in result.hits)
    assert stages[2].detail["token_vectors_computed"] > 0  # not precomputed here: computed and stored


def test_fan_out_over_a_failing_collection_reports_it_once(searcher, lite_store, embedder, tenant_spec, tmp_path):
    ref = searcher.registry.resolve("acme", "tickets", namespace="support")
    with loopback_server(phrasings) as (url, _):
        pipelined = searcher_for(with_pipelines(tenant_spec, url), lite_store, embedder, tmp_path)
        lite_store._client.rename_collection(ref.scope.chunk_collection, ref.scope.chunk_collection + "_away")
        try:
            result = search(pipelined, query="refund card", federated=True, pipeline="multi")
        finally:
            lite_store._client.rename_collection(ref.scope.chunk_collection + "_away", ref.scope.chunk_collection)
            lite_store._client.load_collection(ref.scope.chunk_collection)
    assert [s.name for s in result.trace.stages].count("federate") == 3
    [failure] = result.failures
    assert failure.collection == "support/tickets"
    assert result.hits and {h.collection for h in result.hits} <= {"docs", "leads"}


def test_a_custom_query_stage_runs_before_retrieval_without_a_language_model(searcher, lite_store, embedder,
                                                                            tenant_spec, tmp_path):
    spec = {**tenant_spec, "pipelines": {
        "ids": {"stages": [{"customQuery": {"function": "tests.retrieval.stages.sample_stages:ticket_ids_as_filters"}}]},
        "narrow": {"stages": [{"customQuery": {"function": "tests.retrieval.stages.sample_stages:rewrite_and_filter",
                                               "params": {"text": "onboarding checklist", "field": "source_id",
                                                          "value": "shared"}}}]}}}
    pipelined = searcher_for(TenantConfig.model_validate(spec), lite_store, embedder, tmp_path)
    result = search(pipelined, query="what happened in T-1", collection="tickets", namespace="support", pipeline="ids")
    stages = result.trace.stages
    names = [s.name for s in stages]
    assert names[:2] == ["route", "customQuery:tests.retrieval.stages.sample_stages:ticket_ids_as_filters"]
    assert "fanout" in names and stages[1].detail["queries"] == 2
    assert result.hits[0].source_id == "T-1"
    assert {m.kind for m in result.hits[0].provenance.query_matches} == {"original", "ticketId"}
    # The stage's filter is ANDed with the request's: it narrows, never widens.
    from gateway.storage.filters import Condition, Op
    narrowed = search(pipelined, query="refund", collection="tickets", namespace="support", pipeline="narrow")
    assert {h.source_id for h in narrowed.hits} == {"shared"}
    retrieve = next(s for s in narrowed.trace.stages if s.name == "retrieve:support/tickets")
    assert retrieve.detail["query"] == "rewrite"  # the rewritten text ran, not the caller's
    both = search(pipelined, query="refund", collection="tickets", namespace="support", pipeline="narrow",
                  filter=Condition("source_id", Op.EQ, "T-1"))
    assert both.hits == ()
