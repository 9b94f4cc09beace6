"""The long-lived parts of a gateway process, built once from settings."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.embedding.base import CachedEmbedder
from gateway.embedding.factory import build_embedder
from gateway.settings import Settings
from gateway.storage.milvus import MilvusStore
from gateway.tenancy.loader import load_tenants
from gateway.storage.token_vectors import TokenTarget, TokenVectorStore, default_directory
from gateway.tenancy.registry import CollectionRef, TenantRegistry


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    registry: TenantRegistry
    embedder: CachedEmbedder
    store: MilvusStore
    tokens: TokenVectorStore

    def close(self) -> None:
        self.store.close()
        self.tokens.close()

    def token_store_for(self, ref: CollectionRef) -> TokenTarget | None:
        """Where ingest writes token vectors: only for tenants whose pipelines rerank with them."""
        return token_target(self.registry, self.tokens, ref.scope.tenant)


def token_target(registry: TenantRegistry, tokens: TokenVectorStore | None, tenant: str) -> TokenTarget | None:
    limit = registry.get(tenant).late_interaction_tokens
    return TokenTarget(tokens, limit) if tokens is not None and limit is not None else None


def build_runtime(settings: Settings) -> Runtime:
    """Tenants first (cheap, and the likeliest mistake), then the model, then Milvus."""
    registry = TenantRegistry(load_tenants(settings.tenants_dir))
    embedder = build_embedder(settings)
    token = settings.milvus_token.get_secret_value() if settings.milvus_token else None
    store = MilvusStore(settings.milvus_uri, token=token, dim=embedder.dim)
    tokens = TokenVectorStore(settings.token_vectors_dir or default_directory(settings.milvus_uri))
    return Runtime(settings=settings, registry=registry, embedder=embedder, store=store, tokens=tokens)
