"""Process-wide settings: one frozen object read from GATEWAY_* variables.

Nothing else in the package reads os.environ; whatever needs a setting gets it injected.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


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
    # Where older versions kept token vectors in SQLite (they now live in Milvus, see
    # storage/token_vectors.py); only `gateway backup`/`restore` still copy such a directory.
    token_vectors_dir: Path | None = None

    embedder: EmbedderKind = EmbedderKind.BUNDLED
    embed_batch_size: int = Field(default=16, ge=1, le=512)
    query_cache_size: int = Field(default=4096, ge=0)
    # Token matrices kept in each process for late-interaction reranking (MiB; 0 reads every one
    # from the store): storage/token_vectors.py.
    token_cache_mb: int = Field(default=64, ge=0)
    embedding_url: str | None = None
    embedding_model: str | None = None
    embedding_dim: int | None = None
    embedding_api_key: SecretStr | None = None
    embedding_timeout_s: float = 30.0
    # A directory of vetted model files, one folder per model, read instead of the packages that
    # ship them; each file must match its sha256 pin either way (gateway/embedding/models.py).
    model_dir: Path | None = None

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
    # Ingest jobs (startIngestJob): queued or running jobs per tenant across all processes; jobs one
    # process holds (queued or running) and runs at once; one job's documents and chunks.
    job_max_per_tenant: int = Field(default=2, ge=1)
    job_queue_size: int = Field(default=8, ge=1)
    job_concurrency: int = Field(default=1, ge=1)
    job_max_documents: int = Field(default=4096, ge=1)
    job_max_chunks: int = Field(default=32_768, ge=1)
    # One uploaded PDF or HTML file of an ingest job, parsed in its own process (docs/operations.md,
    # "Upload budgets"): pages, decoded content-stream bytes, extracted text bytes, HTML nesting,
    # CPU seconds (whole seconds, rounded up) and MiB of memory the parse may add.
    upload_max_pages: int = Field(default=2000, ge=1)
    upload_max_inflated_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    upload_max_text_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    upload_max_html_depth: int = Field(default=200, ge=8, le=255)  # libxml2 drops deeper content silently
    upload_parse_seconds: float = Field(default=30.0, gt=0)
    upload_parse_memory_mb: int = Field(default=1024, ge=16)
    # Start on a milvus-lite store that the gateway's record says should hold data but is empty.
    accept_empty_store: bool = False
    # Chunks one collection of the embedded store (milvus-lite) may hold; a write past it is refused
    # (CollectionFull), since milvus-lite's search time grows with every row (docs/operations.md,
    # "When a Milvus server is the answer"). 0: no limit. A Milvus server has none.
    embedded_max_chunks: int = Field(default=1_000_000, ge=0)

    # Candidate depth per signal before fusion, as a multiple of the requested limit.
    candidate_multiplier: int = Field(default=4, ge=1)
    min_candidates: int = Field(default=50, ge=1)

    # Admission control, per tenant and per process (N worker processes admit N times these).
    # A tenant file's `limits:` overrides any of them; docs/operations.md explains each.
    tenant_max_concurrent: int = Field(default=4, ge=1)
    tenant_queue_size: int = Field(default=16, ge=0)
    tenant_queue_timeout_ms: int = Field(default=5000, ge=0)
    tenant_rate: float = Field(default=100.0, gt=0)         # requests a second
    tenant_burst: int = Field(default=200, ge=1)
    tenant_max_cost: int = Field(default=50_000, ge=1)     # cost units per request (docs/operations.md)
    tenant_cost_rate: float = Field(default=20_000.0, gt=0)  # cost units a second
    tenant_cost_burst: int = Field(default=100_000, ge=1)
    deadline_ms: int = Field(default=15_000, ge=1)
    # Request workers: threads shared by all tenants, each running one admitted request at a time,
    # wholly (its embedding, Milvus calls and CPU stages inline). 0 sizes them from the machine
    # (four per core, at least eight). A freed worker takes the next request by fair queueing over
    # admitted cost; one tenant holds at most tenant_max_running workers at once, so others always
    # find one free (docs/operations.md, request workers).
    request_workers: int = Field(default=0, ge=0)
    tenant_max_running: int = Field(default=2, ge=1)
    # /metrics: with a token, callers must send `Authorization: Bearer <token>`; without one,
    # only loopback clients may read it.
    metrics_token: SecretStr | None = None
    # A collection no search of this process has touched for this long is released from the
    # engine's memory (its tenant is inactive there) and loaded again by its next search, which
    # says so in its trace. 0 keeps every collection loaded (docs/operations.md, tenant states).
    tenant_idle_s: float = Field(default=900.0, ge=0)
    # Tenants with their own /metrics series (about 20 KiB each); past this, the least recently
    # active tenant's series are dropped and come back on its next request (docs/operations.md).
    metrics_tenants: int = Field(default=1000, ge=1)
    # Access-log lines for /healthz, /readyz and /metrics too: off, so probes and scrapes every few
    # seconds do not bury the requests (docs/operations.md, access log).
    log_probes: bool = False
    # How often (ms) the interpreter hands the GIL to another waiting thread. Python's 5 ms lets a
    # flooding tenant's threads make every GIL hand-off of a light request wait 5 ms per busy
    # thread; 0.5 ms keeps those waits short for a few per cent of throughput (docs/benchmarks.md).
    gil_switch_interval_ms: float = Field(default=0.5, gt=0, le=100)
    # Cost units of one tenant's requests executing at once (a bigger request runs alone): many
    # small requests in flight, but not two heavy pipelines. 0: 3,000 per core (a unit is about a
    # quarter of a millisecond of one core, so 0.75 s of work per core), 6,000 on 2 cores. A
    # second heavy request of a flooding tenant running beside its first took the CPU a quiet
    # tenant needed: its p50 went 4.9-5.4x its idle figure, 2.3-3.4x with 6,000 (docs/benchmarks.md).
    tenant_max_inflight_cost: int = Field(default=0, ge=0)

    # `gateway serve` worker processes (uvicorn --workers); they share one store, and admission
    # limits above apply per process, so a tenant may run workers x tenant_max_concurrent at once.
    workers: int = Field(default=1, ge=1)
    # `gateway serve` on a milvus-lite path runs milvus-lite's server as a supervised child, so
    # workers and other commands (ingest, eval, verify, backup) share the store while it serves
    # (gateway/storage/server.py). False keeps the store embedded in the one serving process.
    lite_server: bool = True

    # CORS for browser apps on other origins (docs/http.md). Closed by default: no origin is
    # allowed until listed. Comma-separated or a JSON list; "*" allows any origin (keys are
    # bearer tokens, never cookies, so no credentials mode is offered).
    cors_origins: Annotated[tuple[str, ...], NoDecode] = ()
    cors_methods: Annotated[tuple[str, ...], NoDecode] = ("GET", "POST")
    cors_max_age_s: int = Field(default=600, ge=0, le=86_400)
    # GET /mcp (Server-Sent Events) streams: open at once per API key and per process, and how long
    # one may stay open. /mcp is stateless, so nothing is ever sent on one; they are bounded because
    # each holds a connection and a file descriptor (gateway/mcp/streams.py, docs/operations.md).
    mcp_max_streams_per_key: int = Field(default=2, ge=1)
    mcp_max_streams: int = Field(default=64, ge=1)
    mcp_stream_max_s: float = Field(default=300.0, gt=0)
    # Automatic persisted queries registered per process (all tenants); 0 turns APQ off. One
    # tenant keeps at most persisted_queries_per_tenant of them (its own least recently used go
    # first), so it cannot push out another's (gateway/graphql/persisted.py).
    persisted_queries: int = Field(default=1024, ge=0)
    persisted_queries_per_tenant: int = Field(default=256, ge=1)

    # The platform operator's key, as its sha256 hex digest (never the key): it creates, changes and
    # deletes tenants and keys through /graphql (docs/operations.md). Unset: no platform API.
    platform_key_sha256: str | None = None
    # How often (ms) each process reads tenant changes from the store and rescans the tenants
    # directory; a change reaches every worker and replica within about this long.
    tenant_sync_interval_ms: int = Field(default=1000, ge=100, le=60_000)

    @field_validator("platform_key_sha256")
    @classmethod
    def _platform_digest(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError(f"GATEWAY_PLATFORM_KEY_SHA256 {value[:8]!r}... is not a key digest; allowed: 64 "
                             "lowercase hex characters, the sha256 of the key (`printf %s \"$KEY\" | sha256sum`)")
        return value

    @field_validator("cors_origins", "cors_methods", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                import json

                return tuple(json.loads(text))
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for origin in value:
            if origin != "*" and (not origin.startswith(("http://", "https://")) or origin.endswith("/")):
                raise ValueError(f"CORS origin {origin!r} must be '*' or scheme://host[:port] with no path "
                                 "or trailing slash, e.g. 'http://localhost:3000'")
        return tuple(origin.lower() for origin in value)

    @field_validator("cors_methods")
    @classmethod
    def _methods(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        allowed = ("GET", "POST", "DELETE")
        methods = tuple(method.upper() for method in value)
        for method in methods:
            if method not in allowed:
                raise ValueError(f"CORS method {method!r} is not served; allowed: {', '.join(allowed)}")
        return methods


def process_environment() -> dict[str, str]:
    """The process environment, for `env:` references in tenant files (the one other reader)."""
    import os

    return dict(os.environ)
