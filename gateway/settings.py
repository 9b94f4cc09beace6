"""Process-wide settings: one frozen object read from GATEWAY_* variables.

Nothing else in the package reads os.environ; whatever needs a setting gets it injected.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class EmbedderKind(StrEnum):
    BUNDLED = "bundled"
    OPENAI = "openai"


class Settings(BaseSettings):
    """Gateway settings. Every field has an env var GATEWAY_<FIELD>."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_", frozen=True, extra="ignore")

    # A local path is milvus-lite (embedded); http(s)://host:port is a Milvus server.
    milvus_uri: str = "./data/gateway.db"
    milvus_token: SecretStr | None = None
    tenants_dir: Path = Path("./tenants")
    # Token vectors for late-interaction reranking; default: beside a milvus-lite file
    # (`x.db` -> `x.tokens/`), or ./data/token-vectors with a Milvus server.
    token_vectors_dir: Path | None = None

    embedder: EmbedderKind = EmbedderKind.BUNDLED
    embed_batch_size: int = Field(default=16, ge=1, le=512)
    query_cache_size: int = Field(default=4096, ge=0)
    embedding_url: str | None = None
    embedding_model: str | None = None
    embedding_dim: int | None = None
    embedding_api_key: SecretStr | None = None
    embedding_timeout_s: float = 30.0

    host: str = "127.0.0.1"
    port: int = 8000
    # Limits on by default, each configurable.
    max_limit: int = Field(default=100, ge=1)
    max_query_chars: int = Field(default=2000, ge=1)
    max_query_depth: int = Field(default=10, ge=1)
    max_aliases: int = Field(default=15, ge=1)
    max_tokens: int = Field(default=2000, ge=1)
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    # One upsertDocuments call: ingest copies a document's metadata into each of its chunk rows,
    # so documents, chunks and metadata bytes together bound the message sent to Milvus.
    max_upsert_documents: int = Field(default=256, ge=1)
    max_upsert_chunks: int = Field(default=2048, ge=1)
    max_metadata_bytes: int = Field(default=8192, ge=2)
    ingest_demo_on_start: bool = True
    # Start on a milvus-lite store that the gateway's record says should hold data but is empty.
    accept_empty_store: bool = False

    # Candidate depth per signal before fusion, as a multiple of the requested limit.
    candidate_multiplier: int = Field(default=4, ge=1)
    min_candidates: int = Field(default=50, ge=1)


def process_environment() -> dict[str, str]:
    """The process environment, for `env:` references in tenant files (the one other reader)."""
    import os

    return dict(os.environ)
