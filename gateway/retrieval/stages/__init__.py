"""Build a tenant's pipelines from its configuration: every stage object is made at start-up."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.embedding.base import Embedder, token_embedder
from gateway.embedding.models import PACKAGED, ModelSource
from gateway.errors import ConfigError
from gateway.retrieval.llm import ChatClient, chat_client, secret_from
from gateway.retrieval.pipeline import HitStage, Pipeline, QueryStage
from gateway.retrieval.stages.abstain import Abstain
from gateway.retrieval.stages.colbert import ColbertReranker
from gateway.retrieval.stages.compress import Compress
from gateway.retrieval.stages.cross_encoder import CrossEncoderReranker
from gateway.retrieval.stages.custom import Custom
from gateway.retrieval.stages.custom_query import CustomQuery
from gateway.retrieval.stages.decay import Decay
from gateway.retrieval.stages.diversify import Diversify
from gateway.retrieval.stages.expand import ParentExpand
from gateway.retrieval.stages.links import LinkExpand
from gateway.retrieval.stages.query import Hyde, MultiQuery, QueryPlanner
from gateway.retrieval.stages.rerank import (
    HttpReranker,
    LateInteractionReranker,
    Reranker,
    RerankStage,
    ScoreReranker,
)
from gateway.storage.analyzer import Analyzer
from gateway.storage.milvus import MilvusStore
from gateway.storage.token_vectors import TokenVectorStore
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.pipelines import RerankerConfig, StageConfig, StagePhase


@dataclass(frozen=True)
class StageServices:
    """The long-lived parts stages use, injected once."""

    store: MilvusStore
    embedder: Embedder | None
    tokens: TokenVectorStore
    environ: Mapping[str, str]
    analyzer: Analyzer = Analyzer()
    models: ModelSource = PACKAGED


def build_pipelines(tenant: TenantConfig, services: StageServices) -> dict[str, Pipeline]:
    llm = chat_client(tenant, services.environ) if tenant.llm is not None else None
    return {name: _pipeline(tenant, name, config.stages, services, llm)
            for name, config in tenant.pipelines.items()}


def _pipeline(tenant: TenantConfig, name: str, stages: tuple[StageConfig, ...], services: StageServices,
              llm: ChatClient | None) -> Pipeline:
    query_stages: list[QueryStage] = []
    hit_stages: list[HitStage] = []
    for index, stage in enumerate(stages):
        where = stage_label(tenant, name, index, stage)
        if stage.phase is StagePhase.QUERY:
            query_stages.append(_query_stage(stage, llm, where))
        else:
            hit_stages.append(_hit_stage(stage, services, llm, where, tenant))
    return Pipeline(name, query_stages, hit_stages)


def stage_label(tenant: TenantConfig, pipeline: str, index: int, stage: StageConfig) -> str:
    """How start-up names a stage in its refusals (`gateway check-config` names it the same way)."""
    return f"tenant {tenant.id!r} pipeline {pipeline!r} stages[{index}] ({stage.kind})"


def no_token_vectors(where: str, embedder: str) -> str:
    return (f"{where}: lateInteraction needs the bundled embedder's token vectors; "
            f"the configured embedder ({embedder}) has none")


def _query_stage(stage: StageConfig, llm: ChatClient | None, where: str) -> QueryStage:
    if stage.kind == "customQuery":
        return CustomQuery(stage.params, where)
    if llm is None:
        raise ConfigError(f"{where} needs a language model; add an `llm` section to the tenant")
    kinds = {"queryPlanner": QueryPlanner, "multiQuery": MultiQuery, "hyde": Hyde}
    return kinds[stage.kind](stage.params, llm)


def _hit_stage(stage: StageConfig, services: StageServices, llm: ChatClient | None, where: str,
               tenant: TenantConfig) -> HitStage:
    params = stage.params
    if stage.kind == "parentExpand":
        return ParentExpand(params, services.store)
    if stage.kind == "rerank":
        return RerankStage(params, [_reranker(r, services, f"{where}.chain[{i}]") for i, r in enumerate(params.chain)])
    if stage.kind == "compress":
        if params.method == "llm" and llm is None:
            raise ConfigError(f"{where} (method: llm) needs a language model; add an `llm` section to the tenant")
        return Compress(params, services.analyzer, llm)
    if stage.kind == "diversify":
        return Diversify(params)
    if stage.kind == "decay":
        return Decay(params)
    if stage.kind == "abstain":
        return Abstain(params)
    if stage.kind == "expand":
        return LinkExpand(params, services.store, services.embedder, record_tiers(tenant))
    return Custom(params, where)


def record_tiers(tenant: TenantConfig) -> Callable[[str, str, Mapping[str, Any]], str]:
    """A record's trust tier in one of the tenant's collections (its trust_by rule), for stages that add hits."""
    def tier_of(namespace: str, collection: str, metadata: Mapping[str, Any]) -> str:
        return tenant.namespaces[namespace].collections[collection].record_tier(metadata).value
    return tier_of


def _reranker(config: RerankerConfig, services: StageServices, where: str) -> Reranker:
    if config.kind == "lateInteraction":
        embedder = token_embedder(services.embedder)
        if embedder is None:
            raise ConfigError(no_token_vectors(where, getattr(services.embedder, "name", "none")))
        return LateInteractionReranker(config.params, embedder, services.tokens)
    if config.kind == "crossEncoder":
        return CrossEncoderReranker(config.params, services.models)
    if config.kind == "colbert":
        return ColbertReranker(config.params, services.models)
    if config.kind == "http":
        return HttpReranker(config.params, secret_from(services.environ, config.params.api_key_env, where))
    return ScoreReranker(config.params)
