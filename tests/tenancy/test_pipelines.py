"""Pipeline configuration: stage order, closed sets of stages and parameters, LLM requirement."""

import pytest
from pydantic import ValidationError

from gateway.tenancy.config import TenantConfig
from gateway.tenancy.pipelines import Blend, OnError, StagePhase

BASE = {"id": "acme", "namespaces": {"support": {"collections": {"docs": {"trust_tier": "first-party"}}}}}
LLM = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}


def tenant(stages, **extra) -> TenantConfig:
    return TenantConfig.model_validate({**BASE, "pipelines": {"deep": {"stages": stages}}, **extra})


def test_a_full_pipeline_parses_with_typed_parameters():
    config = tenant([
        {"multiQuery": {"count": 2, "on_error": "skip"}},
        {"hyde": {"mode": "replace"}},
        {"parentExpand": {"maxParentChars": 800, "missing": "ignore"}},
        {"rerank": {"chain": [{"lateInteraction": {"topK": 20, "blend": "weighted", "weight": 0.6}},
                              {"score": {"field": "metadata.votes"}}]}},
        {"compress": {"maxCharsPerHit": 300}},
        {"diversify": {"lambda": 0.5, "sourcePenalty": 0.2, "limit": 5}},
        {"decay": {"field": "metadata.published", "halfLifeDays": 30, "missing": "penalize"}},
        {"abstain": {"threshold": 0.4}},
    ], llm=LLM)
    stages = config.pipelines["deep"].stages
    assert [s.kind for s in stages][:3] == ["multiQuery", "hyde", "parentExpand"]
    assert [s.phase for s in stages[:3]] == [StagePhase.QUERY, StagePhase.QUERY, StagePhase.HITS]
    assert stages[0].params.on_error is OnError.SKIP and stages[0].params.count == 2
    chain = stages[3].params.chain
    assert chain[0].kind == "lateInteraction" and chain[0].params.top_k == 20 and chain[0].params.blend is Blend.WEIGHTED
    assert stages[5].params.lambda_ == 0.5 and stages[5].params.source_penalty == 0.2
    assert config.late_interaction_tokens == 512


def test_query_stage_after_hit_stage_names_both():
    with pytest.raises(ValidationError, match=r"query stage 'multiQuery' \(stages\[1\]\) comes after hit stage "
                                              r"'rerank' \(stages\[0\]\)"):
        tenant([{"rerank": {"chain": ["lateInteraction"]}}, {"multiQuery": {}}], llm=LLM)


def test_unknown_stage_lists_the_allowed_stages():
    with pytest.raises(ValidationError, match=r"unknown stage 'rerank2'; allowed: abstain, compress, custom, customQuery, decay, "
                                              r"diversify, expand, hyde, multiQuery, parentExpand, queryPlanner, rerank"):
        tenant([{"rerank2": {}}])


def test_unknown_parameter_lists_the_allowed_parameters():
    with pytest.raises(ValidationError, match=r"unknown parameter 'max_parent_chars' for 'parentExpand'; "
                                              r"allowed: maxParentChars, missing, on_error"):
        tenant([{"parentExpand": {"max_parent_chars": 10}}])


def test_unknown_reranker_and_reranker_parameter():
    with pytest.raises(ValidationError, match=r"unknown reranker 'monoT5'; allowed: colbert, crossEncoder, http, "
                                              r"lateInteraction, score"):
        tenant([{"rerank": {"chain": [{"monoT5": {}}]}}])
    with pytest.raises(ValidationError, match=r"unknown parameter 'top_k' for 'lateInteraction'; allowed: blend, documentTokens, topK, weight"):
        tenant([{"rerank": {"chain": [{"lateInteraction": {"top_k": 3}}]}}])


def test_cross_encoder_parameters_are_typed_and_checked():
    chain = tenant([{"rerank": {"chain": [{"crossEncoder": {"topK": 20, "batchSize": 8, "maxTokens": 384,
                                                            "blend": "rrf", "weight": 0.4}}]}}]
                   ).pipelines["deep"].stages[0].params.chain
    assert chain[0].kind == "crossEncoder"
    assert (chain[0].params.top_k, chain[0].params.batch_size, chain[0].params.max_tokens) == (20, 8, 384)
    assert chain[0].params.blend is Blend.RRF and chain[0].params.weight == 0.4
    with pytest.raises(ValidationError, match=r"unknown parameter 'max_tokens' for 'crossEncoder'; "
                                              r"allowed: batchSize, blend, maxTokens, skipIfConfident, topK, weight"):
        tenant([{"rerank": {"chain": [{"crossEncoder": {"max_tokens": 256}}]}}])
    with pytest.raises(ValidationError, match=r"maxTokens: Input should be less than or equal to 512"):
        tenant([{"rerank": {"chain": [{"crossEncoder": {"maxTokens": 1024}}]}}])
    with pytest.raises(ValidationError, match=r"batchSize: Input should be greater than or equal to 1"):
        tenant([{"rerank": {"chain": [{"crossEncoder": {"batchSize": 0}}]}}])
    with pytest.raises(ValidationError, match=r"blend: Input should be 'replace', 'weighted' or 'rrf'"):
        tenant([{"rerank": {"chain": [{"crossEncoder": {"blend": "max"}}]}}])


def test_cross_encoder_early_exit_is_typed_and_checked():
    def chain(skip):
        return tenant([{"rerank": {"chain": [{"crossEncoder": {"topK": 5, "skipIfConfident": skip}}]}}]
                      ).pipelines["deep"].stages[0].params.chain[0].params

    assert chain({"signalsAgree": True}).skip_if_confident.signals_agree is True
    both = chain({"signalsAgree": True, "scoreGap": 0.2}).skip_if_confident
    assert (both.signals_agree, both.score_gap) == (True, 0.2)
    assert tenant([{"rerank": {"chain": ["crossEncoder"]}}]).pipelines["deep"].stages[0].params.chain[0] \
        .params.skip_if_confident is None  # off by default
    with pytest.raises(ValidationError, match=r"unknown condition 'gap' for skipIfConfident; allowed: scoreGap, "
                                              r"signalsAgree"):
        chain({"gap": 0.2})
    with pytest.raises(ValidationError, match=r"skipIfConfident sets no condition; allowed: signalsAgree: true, "
                                              r"scoreGap: <number > 0>"):
        chain({"signalsAgree": False})
    with pytest.raises(ValidationError, match=r"skipIfConfident.scoreGap: Input should be greater than 0"):
        chain({"scoreGap": 0})


def test_colbert_parameters_are_typed_and_checked():
    chain = tenant([{"rerank": {"chain": [{"colbert": {"topK": 30, "documentTokens": 256, "weight": 0.6}}]}}]
                   ).pipelines["deep"].stages[0].params.chain
    assert chain[0].kind == "colbert"
    assert (chain[0].params.top_k, chain[0].params.document_tokens, chain[0].params.batch_size) == (30, 256, 16)
    assert chain[0].params.blend is Blend.WEIGHTED and chain[0].params.weight == 0.6
    with pytest.raises(ValidationError, match=r"unknown parameter 'maxTokens' for 'colbert'; "
                                              r"allowed: batchSize, blend, documentTokens, topK, weight"):
        tenant([{"rerank": {"chain": [{"colbert": {"maxTokens": 256}}]}}])
    with pytest.raises(ValidationError, match=r"documentTokens: Input should be less than or equal to 512"):
        tenant([{"rerank": {"chain": [{"colbert": {"documentTokens": 1024}}]}}])
    with pytest.raises(ValidationError, match=r"topK: Input should be less than or equal to 200"):
        tenant([{"rerank": {"chain": [{"colbert": {"topK": 500}}]}}])


def test_bad_values_name_the_parameter():
    with pytest.raises(ValidationError, match=r"halfLifeDays: Field required"):
        tenant([{"decay": {}}])
    with pytest.raises(ValidationError, match=r"field"):
        tenant([{"decay": {"halfLifeDays": 3, "field": "tenant"}}])
    with pytest.raises(ValidationError, match=r"on_error"):
        tenant([{"abstain": {"threshold": 0.1, "on_error": "retry"}}])


def test_language_model_stages_need_an_llm_section():
    with pytest.raises(ValidationError, match=r"stages\[0\] \(hyde\) needs a language model"):
        tenant([{"hyde": {}}])
    with pytest.raises(ValidationError, match=r"\(compress\) needs a language model"):
        tenant([{"compress": {"method": "llm"}}])


def test_collection_and_federation_must_name_defined_pipelines():
    spec = {**BASE, "namespaces": {"support": {"collections": {"docs": {"trust_tier": "first-party",
                                                                         "pipeline": "fast"}}}}}
    with pytest.raises(ValidationError, match=r"names pipeline 'fast', which tenant 'acme' does not define; "
                                              r"pipelines: none"):
        TenantConfig.model_validate(spec)
    with pytest.raises(ValidationError, match=r"federation.pipeline names pipeline 'deep'"):
        TenantConfig.model_validate({**BASE, "federation": {"pipeline": "deep"}})


def test_empty_pipeline_and_empty_chain_are_errors():
    with pytest.raises(ValidationError, match="at least one stage"):
        tenant([])
    with pytest.raises(ValidationError, match="at least one reranker"):
        tenant([{"rerank": {"chain": []}}])


def test_one_document_token_length_per_tenant():
    with pytest.raises(ValidationError, match=r"use documentTokens \[256, 512\]"):
        TenantConfig.model_validate({**BASE, "pipelines": {
            "a": {"stages": [{"rerank": {"chain": [{"lateInteraction": {"documentTokens": 256}}]}}]},
            "b": {"stages": [{"rerank": {"chain": ["lateInteraction"]}}]}}})
