"""create_app(settings) -> Starlette. The lifespan builds every long-lived object."""

from __future__ import annotations

import asyncio
import gc
import hmac
import itertools
import logging
import os
import re
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
from gateway.mcp.streams import OpenStreams, StreamLimits
from gateway.mcp.tools import Tools
from gateway.ingest.service import UpsertLimits, Writer
from gateway.jobs.runner import IngestJobs, job_limits
from gateway.jobs.store import JobStore
from gateway.routing.searcher import Searcher
from gateway.runtime import Runtime, build_runtime, engine_problems
from gateway.settings import Settings, process_environment
from gateway.storage.milvus import MilvusStore
from gateway.storage.residency import release_idle_forever
from gateway.telemetry import build_tracer_provider
from gateway.tenancy.auth import ApiKeyAuthenticator
from gateway.tenancy.platform import Platform

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
    platform: Platform | None = None

    @property
    def store(self) -> MilvusStore:
        return self.runtime.store


def create_app(settings: Settings | None = None, *, span_processor: SpanProcessor | None = None,
               metrics: GatewayMetrics | None = None) -> Starlette:
    """`metrics`: a `serve --workers N` worker's, which forward to the parent (telemetry/hub.py)."""
    settings = settings or Settings()
    holder: dict[str, GatewayState] = {}
    admission: dict[str, AdmissionRuntime] = {}
    metrics = metrics if metrics is not None else GatewayMetrics(settings.metrics_tenants)
    schema = build_schema(settings)

    def state() -> GatewayState:
        return holder["state"]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sys.setswitchinterval(settings.gil_switch_interval_ms / 1000)  # process-wide: see Settings
        # Start-up builds objects by the ten thousand (a config, keys, derived objects per tenant),
        # all of which live as long as the process: the cyclic collector walking them again and
        # again while they are built was 0.5 s of reading 20,000 tenant files. It runs once, below,
        # before everything built is frozen.
        collecting = gc.isenabled()
        gc.disable()
        try:
            runtime = await asyncio.to_thread(build_runtime, settings)
        except BaseException as exc:
            if collecting:
                gc.enable()
            if isinstance(exc, GatewayError):
                log.error("gateway cannot start: %s", exc.message)
            raise
        try:
            environ = process_environment()
            authenticator = ApiKeyAuthenticator(runtime.registry, environ,
                                                platform_sha256=settings.platform_key_sha256)
            if settings.ingest_demo_on_start:
                for label, report in await asyncio.to_thread(lambda: list(ingest_seeds(runtime))):
                    log.info("seeded %s: %d chunks from %d sources", label, report.chunks_written, report.sources)
            await asyncio.to_thread(_warm, runtime)
            provider = build_tracer_provider(environ, span_processor)
            provider.add_span_processor(StageMetrics(metrics))
            admission["runtime"] = build_admission(settings, runtime.registry, metrics,
                                                   estimator(runtime.registry, schema.documents))
            # A tenant changed at runtime (platform API, reloaded file) is admitted with its new limits.
            runtime.registry.subscribe(lambda tenant_id: admission["runtime"].admission.refresh(tenant_id)
                                       if tenant_id in runtime.registry else None)
            tracer = provider.get_tracer("gateway")
            searcher = Searcher(runtime.registry, runtime.store, runtime.embedder, settings, tracer,
                                tokens=runtime.tokens, environ=environ)
            metrics.register(HookCollector(searcher.hooks))
            writer = Writer(runtime.registry, runtime.store, runtime.embedder, runtime.tokens,
                            UpsertLimits(settings.max_upsert_documents, settings.max_upsert_chunks,
                                         settings.max_metadata_bytes))
            holder["state"] = GatewayState(
                runtime=runtime, authenticator=authenticator, searcher=searcher,
                tools=Tools(searcher, settings.max_limit, runtime.registry), writer=writer,
                provider=provider, tracer=tracer,
                admin=Admin(runtime.registry, runtime.store, runtime.tokens, writer),
                jobs=IngestJobs(writer, JobStore(runtime.store), job_limits(settings)),
                persisted=PersistedQueries(settings.persisted_queries, _operation_lists(settings, runtime),
                                           per_tenant=settings.persisted_queries_per_tenant),
                platform=_platform(settings, runtime, authenticator))
            app.state.gateway = holder["state"]
            if runtime.sync is not None:
                runtime.sync.start()
            # Everything built so far lives as long as the process. Without this, every full
            # collection walks it again: under a flood of large answers that was 0.5 s pauses
            # holding the GIL, so every tenant stalled (docs/benchmarks.md, fairness).
            gc.collect()
            gc.freeze()
            metrics.serving()
        except GatewayError as exc:  # an env key that is not set, a seed path that is missing, a model file not its pin, ...
            log.error("gateway cannot start: %s", exc.message)
            runtime.close()
            raise
        except BaseException:
            runtime.close()
            raise
        finally:
            if collecting:
                gc.enable()
        sweep = (asyncio.create_task(release_idle_forever(runtime.store.release_idle, settings.tenant_idle_s))
                 if settings.tenant_idle_s > 0 else None)
        try:
            async with mcp.running():
                yield
        finally:
            if sweep is not None:
                sweep.cancel()
            # A job near its end finishes before the store closes; a long one is reported failed (stale).
            await holder["state"].jobs.drain(timeout_s=10)
            holder["state"].jobs.close()  # a parse still under way is killed, not waited for
            if runtime.sync is not None:
                runtime.sync.stop()
            admission["runtime"].workers.shutdown()
            holder["state"].searcher.close()
            provider.shutdown()
            runtime.close()

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        if "state" not in holder:
            return JSONResponse({"status": "starting"}, status_code=503)
        ops = _may_read_ops(request, settings)
        public, detail = await asyncio.to_thread(_readiness, holder["state"].runtime, ops)
        report = detail if ops else public
        return JSONResponse(report, status_code=200 if report["status"] == "ready" else 503)

    async def metrics_route(request: Request) -> Response:
        if not _may_read_ops(request, settings):
            return JSONResponse({"error": "metrics need `Authorization: Bearer <GATEWAY_METRICS_TOKEN>`, "
                                          "or a loopback client when no token is set"}, status_code=403)
        try:
            body = await asyncio.to_thread(metrics.render)
        except OSError as exc:  # with workers: the supervising parent holds the series and did not answer
            return JSONResponse({"error": f"metrics are unavailable: the supervising process did not answer ({exc})"},
                                status_code=503)
        return Response(body, media_type=metrics.content_type)

    graphql = AdmissionApp(StrawberryApp(schema, state), lambda: admission["runtime"])
    streams = OpenStreams(StreamLimits(settings.mcp_max_streams_per_key, settings.mcp_max_streams,
                                       settings.mcp_stream_max_s), metrics)
    mcp = McpEndpoint(state, settings.max_body_bytes, streams, lambda: admission["runtime"])
    middleware = [Middleware(AccessLog, metrics=metrics, worker=metrics.worker, log_probes=settings.log_probes)]
    if settings.cors_origins:  # closed by default (docs/http.md)
        middleware.append(Middleware(Cors, origins=settings.cors_origins, methods=settings.cors_methods,
                                     max_age_s=settings.cors_max_age_s))
    return Starlette(
        routes=[
            # Every method reaches the endpoint, so that a PUT is a coded 405 rather than plain text.
            Route("/graphql", GraphQLEndpoint(graphql, state, settings.max_body_bytes, schema.documents,
                                              platform_app=StrawberryApp(schema, state))),
            Mount("/graphql/static", static_files(), name="graphiql-static"),
            Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics_route),
        ],
        middleware=middleware,
        lifespan=lifespan,
    )


def _platform(settings: Settings, runtime: Runtime, authenticator: ApiKeyAuthenticator) -> Platform | None:
    """The platform API, when GATEWAY_PLATFORM_KEY_SHA256 names the operator's key."""
    if settings.platform_key_sha256 is None or runtime.tenant_store is None:
        return None
    return Platform(runtime.registry, runtime.tenant_store, runtime.store, authenticator,
                    max_limit=settings.max_limit,
                    engine_problems=lambda tenant: engine_problems(settings, [tenant], runtime.store.capabilities))


def _may_read_ops(request: Request, settings: Settings) -> bool:
    """Who may read /metrics and /readyz's detail: with GATEWAY_METRICS_TOKEN set, its bearer
    token; without, loopback clients only."""
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


def _warm(runtime: Runtime) -> None:
    """One dense and one sparse search before the gateway reports ready.

    The first search of a process runs lazy imports and first-use paths (the model's session,
    pymilvus's import of scipy.sparse on the first sparse result); eight threads racing that import
    once failed with a module-lock deadlock. Done here, a burst at a fresh gateway finds them done.
    """
    vector = runtime.embedder.embed_documents(["warm up"])[0]
    # The record says which collections hold rows, without a call per tenant; a Milvus server has
    # none, so there the first few collections are asked (start-up never walks every tenant).
    recorded = runtime.store.guard.recorded_collections() if runtime.store.capabilities.is_lite else None
    refs = (ref for tenant in runtime.registry for ref in runtime.registry.collections(tenant.id)
            if ref.config.image_encoder is None)  # a text collection: an image encoder has its own vector size
    for ref in refs if recorded is not None else itertools.islice(refs, 50):
        if (recorded is None or runtime.store.physical(ref.scope).chunks in recorded) and runtime.store.exists(ref.scope):
            runtime.store.search_dense(ref.scope, vector, 1)
            runtime.store.search_sparse(ref.scope, "warm up", 1)
            return
    from pymilvus.client.utils import SciPyHelper

    SciPyHelper.is_scipy_sparse(None)  # an empty store: at least pymilvus's one-time scipy import


def _readiness(runtime: Runtime, detail: bool) -> tuple[dict[str, object], dict[str, object]]:
    """Ready when the store takes writes and every collection the gateway wrote exists.

    A probe's cost does not grow with the tenants: one write check, the record (local) and one
    listing of the store's collections. A released collection is not a problem: an idle tenant's
    are released on purpose (storage/residency.py), and a search loads what it needs. Only the
    detail (for the ops token) walks the tenants, to name what was never ingested.
    Returns (what anyone may read: the status and a reason naming no tenant or collection, what
    the ops token reads: the collections by name, the last failure, the process).
    """
    store = runtime.store
    # `pid`: which worker process answered (`gateway serve --workers N` runs several behind one port).
    report: dict[str, object] = {"status": "ready", "milvus": store.capabilities.engine, "pid": os.getpid()}
    if store.guard.faults.failing:
        report["last_failure"] = store.guard.faults.reason
    down = store.guard.unavailable()
    health = store.guard.health
    if down is not None and health is not None:  # hung, restarting or refused: asking it anything would only wait
        return ({"status": "unavailable", "reason": health.client_message()},
                {**report, "status": "unavailable", "reason": down})
    try:
        problem = store.guard.write_problem()
        existing = set(store.guard.list_collections())
        lost = store.guard.recorded_collections() - existing
    except GatewayError as exc:
        return ({"status": "unavailable", "reason": _anonymous(exc.message)},
                {**report, "status": "unavailable", "reason": exc.message})
    missing, empty, named = [], [], set()
    if lost or detail:
        for tenant in runtime.registry:
            for ref in runtime.registry.collections(tenant.id):
                chunks = store.physical(ref.scope).chunks
                if chunks in lost:
                    missing.append(f"{tenant.id}:{ref.label}")
                    named.add(chunks)
                elif detail and chunks not in existing:
                    empty.append(f"{tenant.id}:{ref.label}")
        missing += sorted(lost - named)  # the gateway's own (jobs, tenants) and parents, by name
    config = [str(p) for p in runtime.sync.problems()] if runtime.sync is not None else []
    if config:
        # Served from each tenant's previous config; ready, and says why the change was not applied.
        report["tenant_config_problems"] = config
    reasons = ([problem] if problem else []) + (
        [f"tenant file changes not applied (the previous config serves): {'; '.join(config)}"] if config else []) + (
        [f"collections the gateway wrote are missing: {', '.join(missing)}"] if missing else [])
    counted = ([problem] if problem else []) + (
        [f"{len(config)} tenant file change(s) not applied (the previous config serves)"] if config else []) + (
        [f"{len(lost)} collection(s) the gateway wrote are missing"] if lost else [])
    status = "unavailable" if problem or lost else "ready"
    public: dict[str, object] = {"status": status}
    if counted:
        public["reason"] = _anonymous("; ".join(counted))
    return public, {**report, "status": status, **({"reason": "; ".join(reasons)} if reasons else {}),
                    "missing": missing, "not_ingested": empty[:_LISTED], "not_ingested_count": len(empty)}


# Collections named in /readyz's `not_ingested` (the count says how many there are).
_LISTED = 100


# Every collection the gateway names starts `gw_` and is made of [A-Za-z0-9_] (storage/schema.py).
_COLLECTION_NAME = re.compile(r"\bgw_[A-Za-z0-9_]+")


def _anonymous(text: str) -> str:
    """A storage message without Milvus collection names (they spell out tenant ids): one pass
    over the message, whatever the number of tenants."""
    return _COLLECTION_NAME.sub("<collection>", text)
