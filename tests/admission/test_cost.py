from gateway.admission.cost import CROSS_ENCODER_PER_HIT_256, LLM_CALL, SearchShape, TenantCostModel, pipeline_cost
from gateway.retrieval.options import Mode
from gateway.tenancy.config import TenantConfig


def tenant(**extra) -> TenantConfig:
    return TenantConfig.model_validate({
        "id": "t",
        "namespaces": {"ns": {"collections": {
            "docs": {"trust_tier": "first-party", "limit": 10, "candidates": 50,
                     "chunking": {"child_chars": 1000, "child_overlap": 100, "parent_chars": 4000}},
            "faq": {"trust_tier": "first-party", "mode": "sparse", "limit": 5}}}},
        **extra})


PIPELINES = {"pipelines": {
    "heavy": {"stages": [
        {"rerank": {"chain": [{"lateInteraction": {"topK": 40}}]}},
        {"parentExpand": {}},
        {"diversify": {"limit": 20}}]},
    "fanout": {"stages": [{"multiQuery": {"count": 3}}]}},
    "llm": {"base_url": "http://127.0.0.1:9", "model": "m"}}


def test_plain_search_is_targets_times_signals_times_depth_plus_payload():
    model = TenantCostModel(tenant())
    # Unnamed target: both collections (routing may federate); hybrid somewhere: 2 signals;
    # depth = max(candidates 50, limit 10); payload = 10 hits x 1000 content chars / 1000.
    assert model.search(SearchShape()) == 1 + 2 * 2 * 50 + 10
    # One named collection, dense, limit 100, no content asked for.
    assert model.search(SearchShape(limit=100, named_collection=True, mode=Mode.DENSE, content=False)) == 1 + 100


def test_filter_values_are_paid_for_in_every_sub_request():
    model = TenantCostModel(tenant())
    plain = model.search(SearchShape(collections=1, content=False))
    filtered = model.search(SearchShape(collections=1, content=False, filter_values=1025))
    assert filtered - plain == 2 * 1025  # two signals, each carrying the filter


def test_parents_add_their_characters():
    model = TenantCostModel(tenant())
    assert (model.search(SearchShape(collections=1, parent=True))
            - model.search(SearchShape(collections=1))) == 10 * 4000 // 1000


def test_pipeline_stages_and_depth():
    cost = pipeline_cost(TenantConfig.model_validate({**tenant().model_dump(), **PIPELINES}).pipelines["heavy"],
                         limit=10)
    # rerank topK 40, diversify 3 x 20 = 60 deep; late interaction 20 x 40; parents 2 x 60; MMR 20^2 x 60 / 400.
    assert cost.depth == 60 and cost.queries == 1
    assert cost.units == 20 * 40 + 2 * 60 + 20 * 20 * 60 // 400


def test_a_cross_encoder_costs_a_forward_pass_per_hit():
    config = TenantConfig.model_validate({**tenant().model_dump(), "pipelines": {"ce": {"stages": [
        {"rerank": {"chain": [{"crossEncoder": {"topK": 20, "maxTokens": 512}}]}}]}}})
    assert pipeline_cost(config.pipelines["ce"], limit=10).units == CROSS_ENCODER_PER_HIT_256 * 20 * 2


def test_colbert_costs_a_forward_pass_per_passage():
    config = TenantConfig.model_validate({**tenant().model_dump(), "pipelines": {"cb": {"stages": [
        {"rerank": {"chain": [{"colbert": {"topK": 30, "documentTokens": 256}}]}}]}}})
    assert pipeline_cost(config.pipelines["cb"], limit=10).units == CROSS_ENCODER_PER_HIT_256 * 30


def test_query_stages_multiply_retrieval():
    config = TenantConfig.model_validate({**tenant().model_dump(), **PIPELINES})
    model = TenantCostModel(config)
    plain = model.search(SearchShape(collections=1, content=False))
    fanned = model.search(SearchShape(collections=1, content=False, pipeline="fanout"))
    assert fanned == 1 + 4 * (plain - 1) + LLM_CALL


def test_a_custom_query_stage_is_paid_for_as_its_most_queries():
    rewrite = {"customQuery": {"function": "tests.retrieval.stages.sample_stages:many", "maxQueries": 3}}
    config = TenantConfig.model_validate({**tenant().model_dump(), "pipelines": {"rewrite": {"stages": [rewrite]}}})
    model = TenantCostModel(config)
    plain = model.search(SearchShape(collections=1, content=False))
    # Up to 3 queries in all (the question's own among them), one unit for the call, no language model.
    assert model.search(SearchShape(collections=1, content=False, pipeline="rewrite")) == 1 + 3 * (plain - 1) + 1


def test_other_fields_have_small_fixed_costs():
    model = TenantCostModel(tenant())
    assert model.collections() == 3
    assert model.upsert(documents=2, text_chars=10_000) == 20 + 100


def test_a_kept_search_cost_is_the_one_computed_also_past_the_bound():
    from gateway.admission.cost import MAX_SHAPES

    model = TenantCostModel(tenant(**PIPELINES))
    shapes = [SearchShape(limit=limit, pipeline=pipeline, mode=mode, content=content)
              for limit in (None, 5, 100) for pipeline in (None, "heavy", "fanout")
              for mode in (None, Mode.DENSE, Mode.HYBRID) for content in (True, False)]
    for shape in shapes:
        computed = TenantCostModel(tenant(**PIPELINES)).search(shape)
        assert model.search(shape) == model.search(shape) == computed, shape
    for limit in range(1, 2 * MAX_SHAPES):
        assert model.search(SearchShape(limit=limit, named_collection=True, mode=Mode.DENSE, content=False)) == \
            1 + max(50, limit)
