"""customQuery: a tenant's own query stage, held to its limits on every call."""

import pytest

from gateway.errors import ConfigError, InvalidFilter, InvalidInput
from gateway.retrieval.options import Mode
from gateway.retrieval.pipeline import PlannedQuery, StageRequest
from gateway.retrieval.stages.custom_query import CustomQuery
from gateway.retrieval.trace import StageHandle
from gateway.storage.filters import Condition, Op
from gateway.tenancy.pipelines import CustomQueryParams

REQUEST = StageRequest("status of T-1 refund", limit=5, max_query_chars=40, metadata_fields=frozenset({"region"}))
ORIGINAL = [PlannedQuery(REQUEST.question)]
SAMPLES = "tests.retrieval.stages.sample_stages"


def stage(function, **params):
    return CustomQuery(CustomQueryParams.model_validate({"function": f"{SAMPLES}:{function}", **params}), "test")


async def test_a_custom_query_stage_adds_queries_with_their_own_mode_weight_and_filter():
    handle = StageHandle(1)
    queries = await stage("ticket_ids_as_filters").plan(REQUEST, ORIGINAL, handle)
    assert queries == [PlannedQuery(REQUEST.question), PlannedQuery(REQUEST.question, "ticketId", 2.0,
                                                                    Condition("source_id", Op.EQ, "T-1"), Mode.DENSE)]
    assert handle.detail == {"function": f"{SAMPLES}:ticket_ids_as_filters", "queries": 2, "filtered": 1}


async def test_an_async_stage_may_rewrite_the_question_and_add_a_filter_on_a_declared_field():
    rewrite = stage("rewrite_and_filter", params={"text": " refund T-1 ", "field": "metadata.region", "value": "eu"})
    [query] = await rewrite.plan(REQUEST, ORIGINAL, StageHandle(1))
    # A rewritten original is a `rewrite`: the client's own vector belongs to the question's text only.
    assert (query.text, query.kind) == ("refund T-1", "rewrite")
    assert query.filter == Condition("metadata.region", Op.EQ, "eu")


@pytest.mark.parametrize(("function", "params", "error", "message"), [
    ("many", {"params": {"count": 3}, "maxQueries": 2}, InvalidInput,
     r"returned 3 queries; allowed: 1 to 2 \(maxQueries\)"),
    ("many", {"params": {"count": 0}}, InvalidInput, "returned 0 queries; allowed: 1 to 4"),
    ("returns", {"params": {"value": "refund"}}, InvalidInput, "must return a list of PlannedQuery, got str"),
    ("returns", {"params": {"query": {"text": "  "}}}, InvalidInput, "query 0 has no text"),
    ("returns", {"params": {"query": {"text": "x" * 41}}}, InvalidInput, "query 0 is 41 characters; at most 40"),
    ("returns", {"params": {"query": {"text": "refund", "weight": 0}}}, InvalidInput,
     "weight 0; allowed: a number above 0 and at most 10"),
    ("returns", {"params": {"query": {"text": "refund", "weight": float("nan")}}}, InvalidInput, "weight nan"),
    ("returns", {"params": {"query": {"text": "refund", "mode": "dense"}}}, InvalidInput,
     "mode 'dense'; allowed: None or a Mode"),
    ("rewrite_and_filter", {"params": {"text": "refund", "field": "metadata.tenant", "value": "globex"}},
     InvalidFilter, "metadata.tenant"),
])
async def test_results_outside_the_limits_are_refused_naming_the_value_and_what_is_allowed(function, params, error,
                                                                                           message):
    with pytest.raises(error, match=message):
        await stage(function, **params).plan(REQUEST, ORIGINAL, StageHandle(1))


def test_the_function_is_imported_and_its_signature_checked_when_the_stage_is_built():
    with pytest.raises(ConfigError, match=r"must accept \(question, queries, params\)"):
        stage("wrong_shape")
    with pytest.raises(ValueError, match="maxQueries"):
        CustomQueryParams.model_validate({"function": f"{SAMPLES}:many", "maxQueries": 9})
