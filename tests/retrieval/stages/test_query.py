"""Query stages against a loopback chat endpoint: plans, phrasings, passages and their failures."""

import json

import pytest

from gateway.errors import UpstreamUnavailable
from gateway.retrieval.llm import ChatClient
from gateway.retrieval.options import Mode
from gateway.retrieval.pipeline import PlannedQuery, StageRequest
from gateway.retrieval.stages.query import Hyde, MultiQuery, QueryPlanner
from gateway.retrieval.trace import StageHandle
from gateway.storage.filters import Condition, Op
from gateway.tenancy.pipelines import HydeParams, MultiQueryParams, QueryPlannerParams
from tests.loopback import loopback_server

REQUEST = StageRequest("how long do refunds take", limit=5, max_query_chars=60,
                       metadata_fields=frozenset({"region"}))
ORIGINAL = [PlannedQuery(REQUEST.question)]


def answering(content):
    text = content if isinstance(content, str) else json.dumps(content)
    return lambda path, body: (200, {"choices": [{"message": {"content": text}}]})


async def test_multi_query_dedupes_and_keeps_the_original():
    phrasings = {"queries": ["refund duration", "How long do refunds take?", "REFUND   duration", "time to refund"]}
    with loopback_server(answering(phrasings)) as (url, seen):
        stage = MultiQuery(MultiQueryParams.model_validate({"count": 4}), ChatClient(url, "m"))
        handle = StageHandle(1)
        queries = await stage.plan(REQUEST, ORIGINAL, handle)
    assert [(q.text, q.kind) for q in queries] == [
        ("how long do refunds take", "original"), ("refund duration", "paraphrase"),
        ("How long do refunds take?", "paraphrase"), ("time to refund", "paraphrase")]
    assert handle.detail["duplicates_dropped"] == 1
    assert "4 alternative phrasings" in seen[0]["body"]["messages"][0]["content"]


async def test_multi_query_without_original_and_cut_to_count():
    with loopback_server(answering({"queries": ["a b", "c d", "e f"]})) as (url, _):
        stage = MultiQuery(MultiQueryParams.model_validate({"count": 2, "keepOriginal": False}), ChatClient(url, "m"))
        queries = await stage.plan(REQUEST, ORIGINAL, StageHandle(1))
    assert [q.text for q in queries] == ["a b", "c d"]


async def test_multi_query_malformed_json_raises_for_on_error_to_decide():
    with loopback_server(answering("Sure! Here are some queries: refund time")) as (url, _):
        stage = MultiQuery(MultiQueryParams(), ChatClient(url, "m"))
        with pytest.raises(UpstreamUnavailable, match="malformed JSON"):
            await stage.plan(REQUEST, ORIGINAL, StageHandle(1))


async def test_hyde_beside_and_replace():
    passage = {"passage": "Refunds are returned to the original card within five business days of approval."}
    with loopback_server(answering(passage)) as (url, _):
        beside = await Hyde(HydeParams(), ChatClient(url, "m")).plan(REQUEST, ORIGINAL, StageHandle(1))
        replaced = await Hyde(HydeParams.model_validate({"mode": "replace"}), ChatClient(url, "m")).plan(
            REQUEST, ORIGINAL, StageHandle(1))
    assert [q.kind for q in beside] == ["original", "hyde"]
    assert len(beside[1].text) <= REQUEST.max_query_chars  # cut to the gateway's query limit
    assert [q.kind for q in replaced] == ["hyde"]


async def test_hyde_without_passage_is_an_upstream_error():
    with loopback_server(answering({"answer": "x"})) as (url, _):
        with pytest.raises(UpstreamUnavailable, match="'passage'"):
            await Hyde(HydeParams(), ChatClient(url, "m")).plan(REQUEST, ORIGINAL, StageHandle(1))


async def test_planner_types_weights_and_validated_filters():
    plan = {"queries": [
        {"text": "refund processing time", "type": "semantic", "weight": 0.8},
        {"text": "RF-2041", "type": "keyword", "weight": 0.5,
         "filter": {"field": "metadata.region", "op": "eq", "value": "eu"}},
        {"text": "refund policy emea", "type": "hybrid", "filter": {"field": "metadata.secret", "op": "eq", "value": 1}},
    ]}
    with loopback_server(answering(plan)) as (url, seen):
        handle = StageHandle(1)
        queries = await QueryPlanner(QueryPlannerParams(), ChatClient(url, "m")).plan(REQUEST, ORIGINAL, handle)
    assert [(q.text, q.kind, q.weight, q.mode) for q in queries] == [
        ("how long do refunds take", "original", 1.0, None),
        ("refund processing time", "planner", 0.8, Mode.DENSE),
        ("RF-2041", "planner", 0.5, Mode.SPARSE)]
    assert queries[2].filter == Condition("metadata.region", Op.EQ, "eu")
    # The filter on an undeclared field drops that sub-query, and the trace says so.
    assert handle.warnings and "sub-query 3 dropped" in handle.warnings[0] and "metadata.secret" in handle.warnings[0]
    assert "metadata.region" in seen[0]["body"]["messages"][0]["content"]


@pytest.mark.parametrize("plan", [
    {"queries": []},
    {"queries": [{"text": ""}]},
    {"queries": [{"text": "x", "type": "fuzzy"}]},
    {"queries": [{"text": "x", "weight": 3}]},
])
async def test_planner_rejects_answers_outside_the_contract(plan):
    with loopback_server(answering(plan)) as (url, _):
        with pytest.raises(UpstreamUnavailable):
            await QueryPlanner(QueryPlannerParams(), ChatClient(url, "m")).plan(REQUEST, ORIGINAL, StageHandle(1))
