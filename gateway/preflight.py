"""Every configuration mistake that stops `gateway serve`, found in one pass without opening storage
or loading a model. `gateway check-config` prints them; `serve` refuses with them before it starts.

Each message is the one start-up itself would give (the same functions build both), behind the
tenant file and key, or the GATEWAY_* variable, it comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gateway.errors import ConfigError, GatewayError
from gateway.settings import EmbedderKind, Settings
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.loader import ConfigProblem, ParsedFiles, read_tenant_files, salvaged_tenant


@dataclass(frozen=True, slots=True)
class SettingProblem:
    """A process-wide setting that start-up refuses (an environment variable, or a `serve` option)."""

    variable: str
    message: str

    def __str__(self) -> str:
        return f"{self.variable}: {self.message}"


Problem = ConfigProblem | SettingProblem


def read_settings() -> Settings:
    """Settings from the environment; a value that does not parse is a ConfigError naming every
    variable, its value and what is allowed (rather than pydantic's traceback)."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = settings_problems(exc)
        raise ConfigError(f"{len(problems)} problem(s) in the GATEWAY_* settings:\n"
                          + "\n".join(f"  {p}" for p in problems)) from None


def settings_problems(exc: ValidationError) -> list[SettingProblem]:
    found = []
    for error in exc.errors():
        variable = "GATEWAY_" + "_".join(str(part) for part in error["loc"]).upper()
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] != "value_error":  # a validator's own message names the value already
            message = f"{message}; got {error.get('input')!r}"
        found.append(SettingProblem(variable, message))
    return found


def workers_problem(settings: Settings, workers: int, option: str = "GATEWAY_WORKERS") -> str | None:
    """Why `serve` cannot run `workers` processes with these settings (`option` names where the
    number came from), or None."""
    from gateway.storage.milvus import is_embedded

    if workers < 1:
        return f"{option} {workers}: a gateway needs at least 1 worker process"
    if workers > 1 and is_embedded(settings.milvus_uri) and not settings.lite_server:
        return (f"{option} {workers} needs one store all workers can reach: GATEWAY_LITE_SERVER=true "
                f"(the default) or a Milvus server URI; GATEWAY_LITE_SERVER=false keeps "
                f"{settings.milvus_uri!r} embedded in one process")
    return None


def configuration_problems(settings: Settings, where: Path, environ: Mapping[str, str], *,
                           parsed: ParsedFiles | None = None, workers: int | None = None,
                           workers_option: str = "GATEWAY_WORKERS") -> tuple[dict[str, TenantConfig], list[Problem]]:
    """The tenants in `where` (a folder of tenant files or one file), and every problem that would
    stop `serve` with these settings and environment. Seed paths and operation manifests are read
    relative to the folder, as `serve` reads them relative to GATEWAY_TENANTS_DIR."""
    tenants, origins, problems = read_tenant_files(where, max_limit=settings.max_limit, parsed=parsed)
    found: list[Problem] = [*problems]
    count = settings.workers if workers is None else workers
    problem = workers_problem(settings, count, workers_option)
    if problem is not None:
        found.append(SettingProblem(workers_option, problem))
    # A file with problems is still checked for what start-up would refuse next (its keys, seeds,
    # secrets), from its parts that validate, so that one run lists everything.
    checked, checked_origins = dict(tenants), dict(origins)
    for path in sorted({p.file for p in problems if isinstance(p.file, Path) and p.file.is_file()}):
        salvaged = salvaged_tenant(path, max_limit=settings.max_limit)
        if salvaged is not None and salvaged.id not in checked:
            checked[salvaged.id], checked_origins[salvaged.id] = salvaged, path
    base = where if where.is_dir() else where.parent
    found += startup_problems(settings, checked, checked_origins, base, environ)
    return tenants, found


def startup_problems(settings: Settings, tenants: Mapping[str, TenantConfig], origins: Mapping[str, Path],
                     base: Path, environ: Mapping[str, str]) -> list[Problem]:
    """What start-up refuses beyond each tenant file's own validation: the engine, the embedder and
    admission settings, keys (unset `env` variables, a key of two tenants), secrets that stages and
    hooks read, the bundled rerank models, seed paths (when seeding on start) and operation manifests."""
    from gateway.admission.setup import limit_problems
    from gateway.embedding.factory import embedder_problems
    from gateway.runtime import engine_problems
    from gateway.tenancy.auth import key_problems

    found: list[Problem] = [SettingProblem("GATEWAY_MILVUS_URI", p) for p in engine_problems(settings, tenants.values())]
    found += [SettingProblem("GATEWAY_EMBEDDER", p) for p in embedder_problems(settings)]
    for tenant_id, message in limit_problems(settings, tenants.values()):
        found.append(SettingProblem("GATEWAY_TENANT_*", message) if tenant_id is None
                     else ConfigProblem(origins[tenant_id], "limits", message))
    found += [ConfigProblem(origins[tenant_id], key, message)
              for tenant_id, key, message in key_problems(tenants.values(), environ,
                                                          platform_sha256=settings.platform_key_sha256)]
    for tenant in tenants.values():
        found += [ConfigProblem(origins[tenant.id], key, message)
                  for key, message in tenant_startup_problems(settings, tenant, base, environ)]
    return found


def tenant_startup_problems(settings: Settings, tenant: TenantConfig, base: Path,
                            environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(key, message) for what building this tenant's parts at start-up refuses."""
    from gateway.retrieval.llm import secret_from

    found: list[tuple[str, str]] = []

    def check(key: str, build) -> None:
        try:
            build()
        except GatewayError as exc:
            found.append((key, exc.message))

    if tenant.llm is not None:  # its client is built at start-up (gateway/retrieval/llm.py)
        check("llm.api_key_env", lambda: secret_from(environ, tenant.llm.api_key_env, f"tenant {tenant.id!r} llm"))
    if tenant.hooks.webhook is not None:  # gateway/hooks/delivery.py
        check("hooks.webhook.secret_env", lambda: secret_from(environ, tenant.hooks.webhook.secret_env,
                                                              f"tenant {tenant.id!r} hooks.webhook", "signing secret"))
    found += _reranker_problems(settings, tenant, environ)
    if settings.ingest_demo_on_start:
        found += _seed_problems(tenant, base)
    operations = tenant.operations
    if operations.manifest is not None:
        from gateway.graphql.persisted import OperationList

        check("operations.manifest", lambda: OperationList.load(base / operations.manifest,
                                                                only_listed=operations.allow_only_listed))
    return found


def _reranker_problems(settings: Settings, tenant: TenantConfig, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """What gateway/retrieval/stages builds for each reranker and refuses: a secret that is not set,
    token vectors the configured embedder does not have, a bundled model whose files are missing or
    not their sha256 pins (gateway/embedding/models.py)."""
    from gateway.embedding.models import RERANKER_MODELS, ModelSource
    from gateway.retrieval.llm import secret_from
    from gateway.retrieval.stages import no_token_vectors, stage_label

    found = []
    for name, pipeline in tenant.pipelines.items():
        for index, stage in enumerate(pipeline.stages):
            if stage.kind != "rerank":
                continue
            for position, reranker in enumerate(stage.params.chain):
                key = f"pipelines.{name}.stages.{index}.rerank.chain.{position}"
                where = f"{stage_label(tenant, name, index, stage)}.chain[{position}]"
                try:
                    if reranker.kind == "http":
                        secret_from(environ, reranker.params.api_key_env, where)
                    elif reranker.kind == "lateInteraction" and settings.embedder is not EmbedderKind.BUNDLED:
                        raise ConfigError(no_token_vectors(where, f"openai:{settings.embedding_model}"))
                    elif reranker.kind in RERANKER_MODELS:
                        ModelSource(settings.model_dir).verify(RERANKER_MODELS[reranker.kind])
                except ConfigError as exc:
                    found.append((key, exc.message))
    return found


def _seed_problems(tenant: TenantConfig, base: Path) -> list[tuple[str, str]]:
    """Seed paths that start-up's seeding (gateway/ingest/seed.py) could not read."""
    from gateway.ingest.loaders import count_documents
    from gateway.ingest.seed import seed_paths

    found = []
    for index, corpus in enumerate(tenant.seed):
        namespace = tenant.namespaces.get(corpus.namespace)
        collection = namespace.collections.get(corpus.collection) if namespace is not None else None
        if collection is None:  # a problem of the file itself (seed targets), reported with it
            continue
        images = "image" in collection.modality
        try:
            count_documents(seed_paths(base, corpus), images=images)
        except GatewayError as exc:
            found.append((f"seed.{index}.paths", exc.message))
    return found
