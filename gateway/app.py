"""create_app(settings) -> Starlette. The lifespan builds every long-lived object."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from opentelemetry import trace as otel
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.errors import GatewayError
from gateway.graphql.endpoint import GraphQLEndpoint, StrawberryApp
from gateway.graphql.schema import build_schema
from gateway.ingest.seed import ingest_seeds
from gateway.mcp.server import McpEndpoint
from gateway.mcp.tools import Tools
from gateway.ingest.service import UpsertLimits, Writer
from gateway.routing.searcher import Searcher
from gateway.runtime import Runtime, build_runtime
from gateway.settings import Settings, process_environment
from gateway.storage.milvus import MilvusStore
from gateway.telemetry import build_tracer_provider
from gateway.tenancy.auth import ApiKeyAuthenticator

log = logging.getLogger("gateway")


@dataclass(frozen=True)
class GatewayState:
    runtime: Runtime
    authenticator: ApiKeyAuthenticator
    searcher: Searcher
    writer: Writer
    tools: Tools
    provider: TracerProvider
    tracer: otel.Tracer

    @property
    def store(self) -> MilvusStore:
        return self.runtime.store


def create_app(settings: Settings | None = None, *, span_processor: SpanProcessor | None = None) -> Starlette:
    settings = settings or Settings()
    holder: dict[str, GatewayState] = {}

    def state() -> GatewayState:
        return holder["state"]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            runtime = await asyncio.to_thread(build_runtime, settings)
        except GatewayError as exc:
            log.error("gateway cannot start: %s", exc.message)
            raise
        try:
            environ = process_environment()
            authenticator = ApiKeyAuthenticator(runtime.registry, environ)
            if settings.ingest_demo_on_start:
                for label, report in await asyncio.to_thread(lambda: list(ingest_seeds(runtime))):
                    log.info("seeded %s: %d chunks from %d sources", label, report.chunks_written, report.sources)
            await asyncio.to_thread(_open_collections, runtime)
            provider = build_tracer_provider(environ, span_processor)
            tracer = provider.get_tracer("gateway")
            searcher = Searcher(runtime.registry, runtime.store, runtime.embedder, settings, tracer,
                                tokens=runtime.tokens, environ=environ)
            holder["state"] = GatewayState(
                runtime=runtime, authenticator=authenticator, searcher=searcher,
                tools=Tools(searcher, settings.max_limit),
                writer=Writer(runtime.registry, runtime.store, runtime.embedder, runtime.tokens,
                              UpsertLimits(settings.max_upsert_documents, settings.max_upsert_chunks,
                                           settings.max_metadata_bytes)),
                provider=provider, tracer=tracer)
            app.state.gateway = holder["state"]
        except BaseException:
            runtime.close()
            raise
        try:
            async with mcp.running():
                yield
        finally:
            provider.shutdown()
            runtime.close()

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        if "state" not in holder:
            return JSONResponse({"status": "starting"}, status_code=503)
        report = await asyncio.to_thread(_readiness, holder["state"].runtime)
        return JSONResponse(report, status_code=200 if report["status"] == "ready" else 503)

    graphql = StrawberryApp(build_schema(settings), state)
    mcp = McpEndpoint(state, settings.max_body_bytes)
    return Starlette(
        routes=[
            # Every method reaches the endpoint, so that a PUT is a coded 405 rather than plain text.
            Route("/graphql", GraphQLEndpoint(graphql, state, settings.max_body_bytes)),
            Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
        ],
        lifespan=lifespan,
    )


def _open_collections(runtime: Runtime) -> None:
    """Collections come back released after a restart: load every one that exists."""
    for tenant in runtime.registry:
        for ref in runtime.registry.collections(tenant.id):
            runtime.store.open_existing(ref.scope)


def _readiness(runtime: Runtime) -> dict[str, object]:
    """Ready when the store takes writes and every collection the gateway wrote is there and loaded.

    A released collection (Milvus restarted) is loaded again here, so readiness comes back by
    itself; a configured collection never ingested is listed but does not make the gateway unready.
    """
    store = runtime.store
    report: dict[str, object] = {"status": "ready", "milvus": store.capabilities.engine}
    if store.guard.faults.failing:
        report["last_failure"] = store.guard.faults.reason
    unloaded, empty, missing = [], [], []
    try:
        problem = store.guard.write_problem()
        recorded = store.guard.recorded_collections()
        for tenant in runtime.registry:
            for ref in runtime.registry.collections(tenant.id):
                label = f"{tenant.id}:{ref.label}"
                if not store.exists(ref.scope):
                    (missing if ref.scope.chunk_collection in recorded else empty).append(label)
                elif not store.is_loaded(ref.scope):
                    try:
                        store.guard.reload(ref.scope.chunk_collection, ref.scope.parent_collection)
                    except GatewayError:
                        unloaded.append(label)
    except GatewayError as exc:
        return {**report, "status": "unavailable", "reason": exc.message}
    reasons = ([problem] if problem else []) + (
        [f"collections the gateway wrote are missing: {', '.join(missing)}"] if missing else []) + (
        [f"collections could not be loaded: {', '.join(unloaded)}"] if unloaded else [])
    status = "unavailable" if problem or missing else "not_loaded" if unloaded else "ready"
    return {**report, "status": status, **({"reason": "; ".join(reasons)} if reasons else {}),
            "not_loaded": unloaded, "not_ingested": empty, "missing": missing}
