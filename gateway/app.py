"""create_app(settings) -> Starlette. The lifespan builds every long-lived object."""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from opentelemetry import trace as otel
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from gateway.admin.service import Admin
from gateway.admission.asgi import AdmissionApp, AdmissionRuntime
from gateway.admission.setup import build_admission
from gateway.graphql.cost import estimator
from gateway.telemetry.access import AccessLog
from gateway.telemetry.metrics import GatewayMetrics, StageMetrics

from gateway.cors import Cors
from gateway.errors import GatewayError
from gateway.graphql.endpoint import GraphQLEndpoint, StrawberryApp
from gateway.graphql.ide import static_files
from gateway.graphql.persisted import OperationList, PersistedQueries
from gateway.graphql.schema import build_schema
from gateway.hooks.metrics import HookCollector
from gateway.ingest.seed import ingest_seeds
from gateway.mcp.server import McpEndpoint
from gateway.mcp.tools import Tools
from gateway.ingest.service import UpsertLimits, Writer
from gateway.jobs.runner import IngestJobs, job_limits
from gateway.jobs.store import JobStore
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
    persisted: PersistedQueries
    admin: Admin
    jobs: IngestJobs

    @property
    def store(self) -> MilvusStore:
        return self.runtime.store


def create_app(settings: Settings | None = None, *, span_processor: SpanProcessor | None = None) -> Starlette:
    settings = settings or Settings()
    holder: dict[str, GatewayState] = {}
    admission: dict[str, AdmissionRuntime] = {}
    metrics = GatewayMetrics()
    schema = build_schema(settings)

    def state() -> GatewayState:
        return holder["state"]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sys.setswitchinterval(settings.gil_switch_interval_ms / 1000)  # process-wide: see Settings
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
            await asyncio.to_thread(_warm, runtime)
            provider = build_tracer_provider(environ, span_processor)
            provider.add_span_processor(StageMetrics(metrics))
            admission["runtime"] = build_admission(settings, runtime.registry, metrics,
                                                   estimator(runtime.registry, schema.documents))
            tracer = provider.get_tracer("gateway")
            searcher = Searcher(runtime.registry, runtime.store, runtime.embedder, settings, tracer,
                                tokens=runtime.tokens, environ=environ)
            metrics.registry.register(HookCollector(searcher.hooks))
            writer = Writer(runtime.registry, runtime.store, runtime.embedder, runtime.tokens,
                            UpsertLimits(settings.max_upsert_documents, settings.max_upsert_chunks,
                                         settings.max_metadata_bytes))
            holder["state"] = GatewayState(
                runtime=runtime, authenticator=authenticator, searcher=searcher,
                tools=Tools(searcher, settings.max_limit, runtime.registry), writer=writer,
                provider=provider, tracer=tracer,
                admin=Admin(runtime.registry, runtime.store, runtime.tokens, writer),
                jobs=IngestJobs(writer, JobStore(runtime.store), job_limits(settings)),
                persisted=PersistedQueries(settings.persisted_queries, _operation_lists(settings, runtime)))
            app.state.gateway = holder["state"]
            # Everything built so far lives as long as the process. Without this, every full
            # collection walks it again: under a flood of large answers that was 0.5 s pauses
            # holding the GIL, so every tenant stalled (docs/benchmarks.md, fairness).
            gc.collect()
            gc.freeze()
        except BaseException:
            runtime.close()
            raise
        try:
            async with mcp.running():
                yield
        finally:
            # A job near its end finishes before the store closes; a long one is reported failed (stale).
            await holder["state"].jobs.drain(timeout_s=10)
            admission["runtime"].loops.shutdown()
            admission["runtime"].scheduler.shutdown()
            holder["state"].searcher.close()
            provider.shutdown()
            runtime.close()

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        if "state" not in holder:
            return JSONResponse({"status": "starting"}, status_code=503)
        report = await asyncio.to_thread(_readiness, holder["state"].runtime)
        return JSONResponse(report, status_code=200 if report["status"] == "ready" else 503)

    async def metrics_route(request: Request) -> Response:
        if not _may_read_metrics(request, settings):
            return JSONResponse({"error": "metrics need `Authorization: Bearer <GATEWAY_METRICS_TOKEN>`, "
                                          "or a loopback client when no token is set"}, status_code=403)
        return Response(metrics.render(), media_type=metrics.content_type)

    graphql = AdmissionApp(StrawberryApp(schema, state), lambda: admission["runtime"])
    mcp = McpEndpoint(state, settings.max_body_bytes, lambda: admission["runtime"])
    middleware = [Middleware(AccessLog, metrics=metrics)]
    if settings.cors_origins:  # closed by default (docs/http.md)
        middleware.append(Middleware(Cors, origins=settings.cors_origins, methods=settings.cors_methods,
                                     max_age_s=settings.cors_max_age_s))
    return Starlette(
        routes=[
            # Every method reaches the endpoint, so that a PUT is a coded 405 rather than plain text.
            Route("/graphql", GraphQLEndpoint(graphql, state, settings.max_body_bytes, schema.documents)),
            Mount("/graphql/static", static_files(), name="graphiql-static"),
            Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics_route),
        ],
        middleware=middleware,
        lifespan=lifespan,
    )


def _may_read_metrics(request: Request, settings: Settings) -> bool:
    """With GATEWAY_METRICS_TOKEN set, its bearer token; without, loopback clients only."""
    if settings.metrics_token is not None:
        expected = f"Bearer {settings.metrics_token.get_secret_value()}"
        return hmac.compare_digest(request.headers.get("authorization", "").encode(), expected.encode())
    host = request.client.host if request.client else ""
    return host in ("127.0.0.1", "::1", "localhost")


def _operation_lists(settings: Settings, runtime: Runtime) -> dict[str, OperationList]:
    """Each tenant's operation manifest (tenant `operations:`), read once at start-up."""
    lists = {}
    for tenant in runtime.registry:
        operations = tenant.operations
        if operations.manifest is not None:
            lists[tenant.id] = OperationList.load(settings.tenants_dir / operations.manifest,
                                                  only_listed=operations.allow_only_listed)
    return lists


def _open_collections(runtime: Runtime) -> None:
    """Collections come back released after a restart: load every one that exists."""
    for tenant in runtime.registry:
        for ref in runtime.registry.collections(tenant.id):
            runtime.store.open_existing(ref.scope)


def _warm(runtime: Runtime) -> None:
    """One dense and one sparse search before the gateway reports ready.

    The first search of a process runs lazy imports and first-use paths (the model's session,
    pymilvus's import of scipy.sparse on the first sparse result); eight threads racing that import
    once failed with a module-lock deadlock. Done here, a burst at a fresh gateway finds them done.
    """
    vector = runtime.embedder.embed_documents(["warm up"])[0]
    for tenant in runtime.registry:
        for ref in runtime.registry.collections(tenant.id):
            # A text collection: an image collection's vectors have its own encoder's size.
            if ref.config.image_encoder is None and runtime.store.exists(ref.scope):
                runtime.store.search_dense(ref.scope, vector, 1)
                runtime.store.search_sparse(ref.scope, "warm up", 1)
                return
    from pymilvus.client.utils import SciPyHelper

    SciPyHelper.is_scipy_sparse(None)  # an empty store: at least pymilvus's one-time scipy import


def _readiness(runtime: Runtime) -> dict[str, object]:
    """Ready when the store takes writes and every collection the gateway wrote is there and loaded.

    A released collection (Milvus restarted) is loaded again here, so readiness comes back by
    itself; a configured collection never ingested is listed but does not make the gateway unready.
    """
    store = runtime.store
    # `pid`: which worker process answered (`gateway serve --workers N` runs several behind one port).
    report: dict[str, object] = {"status": "ready", "milvus": store.capabilities.engine, "pid": os.getpid()}
    if store.guard.faults.failing:
        report["last_failure"] = store.guard.faults.reason
    down = store.guard.unavailable()
    if down is not None:  # hung, restarting or refused: asking it anything would only wait
        return {**report, "status": "unavailable", "reason": down}
    unloaded, empty, missing = [], [], []
    try:
        problem = store.guard.write_problem()
        recorded = store.guard.recorded_collections()
        for tenant in runtime.registry:
            for ref in runtime.registry.collections(tenant.id):
                label = f"{tenant.id}:{ref.label}"
                if not store.exists(ref.scope):
                    (missing if store.physical(ref.scope).chunks in recorded else empty).append(label)
                elif not store.is_loaded(ref.scope):
                    try:
                        where = store.physical(ref.scope)
                        store.guard.reload(where.chunks, where.parents)
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
