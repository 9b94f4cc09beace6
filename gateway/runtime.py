"""The long-lived parts of a gateway process, built once from settings."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.embedding.base import CachedEmbedder
from gateway.embedding.factory import build_embedder
from gateway.settings import Settings
from gateway.errors import ConfigError, StorageUnavailable
from gateway.storage.capabilities import Capabilities, capability_problems, lite_capabilities
from gateway.storage.integrity import Problem, check_files, file_hashes, refusal, restore_hint
from gateway.storage.milvus import MilvusStore, is_embedded
from gateway.storage.schema import Layout
from gateway.storage.record import RecordError, RecordSnapshot, StorePaths, read_record
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.loader import load_tenants
from gateway.storage.token_vectors import TokenTarget, TokenVectorStore
from gateway.tenancy.registry import CollectionRef, TenantRegistry

log = logging.getLogger("gateway")


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
    registry = TenantRegistry(load_tenants(settings.tenants_dir, max_limit=settings.max_limit))
    _refuse_engine(engine_problems(settings, registry))  # milvus-lite: before anything is opened
    embedder = build_embedder(settings)
    store = open_store(settings, dim=embedder.dim, layout=Layout.of((t.id, t.isolation) for t in registry))
    try:
        _refuse_engine(engine_problems(settings, registry, store.capabilities))
    except ConfigError:
        store.close()
        raise
    if not store.capabilities.known_release:
        log.warning("Milvus version %r names no release; BM25 and partition keys are assumed to be there",
                    store.capabilities.version)
    log.info("milvus: %s", store.capabilities.describe())
    tokens = TokenVectorStore(store)
    return Runtime(settings=settings, registry=registry, embedder=embedder, store=store, tokens=tokens)


def engine_problems(settings: Settings, tenants: Iterable[TenantConfig],
                    capabilities: Capabilities | None = None) -> list[str]:
    """What the tenants ask of Milvus that the engine cannot do. Without detected capabilities,
    what the URI alone tells (a path is milvus-lite), so `gateway check-config` can say it too."""
    if capabilities is None:
        if not is_embedded(settings.milvus_uri):
            return []
        capabilities = lite_capabilities()
    return capability_problems(capabilities, {t.id: t.isolation for t in tenants}, uri=settings.milvus_uri)


def _refuse_engine(problems: list[str]) -> None:
    if problems:
        raise ConfigError(f"{len(problems)} problem(s) with what the tenants need of Milvus:\n"
                          + "\n".join(f"  {p}" for p in problems))


def open_store(settings: Settings, *, dim: int, layout: Layout = Layout()) -> MilvusStore:
    """Open Milvus; a milvus-lite store is checked against the gateway's record before and after opening.

    Before: files that opening would destroy (gateway/storage/integrity.py). After: each recorded
    collection's row count. Either mismatch refuses to start, naming the file and the restore
    command; a store that is only unexpectedly empty starts with `accept_empty_store`.
    """
    token = settings.milvus_token.get_secret_value() if settings.milvus_token else None
    uri = settings.milvus_uri
    if not is_embedded(uri):
        return MilvusStore(uri, token=token, dim=dim, layout=layout)
    paths = StorePaths.of(uri)
    try:
        record = read_record(paths.record)
    except RecordError as exc:
        raise StorageUnavailable(f"{exc}; {restore_hint(paths)}") from exc
    _refuse(paths, check_files(paths, record, accept_empty=settings.accept_empty_store),
            "Nothing was changed on disk. ")
    store = MilvusStore(uri, token=token, dim=dim, layout=layout)
    try:
        problems = _check_counts(store, paths, record, accept_empty=settings.accept_empty_store)
        if problems:
            # Another process (serve's workers, an ingest) may have deleted and recorded rows between
            # our reading the record and counting: compare once more with the record as it is now.
            problems = _check_counts(store, paths, read_record(paths.record), accept_empty=settings.accept_empty_store)
        _refuse(paths, problems)
    except BaseException:
        store.close()
        raise
    return store


def _check_counts(store: MilvusStore, paths: StorePaths, record: RecordSnapshot, *,
                  accept_empty: bool) -> list[Problem]:
    guard = store.guard
    on_disk = set(guard.list_collections())
    counts = {name: guard.count_rows(name) for name in sorted(on_disk)}
    problems = [Problem(paths.store / "collections" / name,
                        f"holds {counts[name]} row(s), but the gateway's record {paths.record} says it held "
                        f"{entry.rows} after its last committed write")
                for name, entry in record.collections.items()
                if name in counts and not entry.accepts(counts[name])]
    if not problems and (accept_empty or not record.exists or set(record.collections) != on_disk):
        # A first start, an older store without a record, or an accepted empty store: record what is there.
        known = {name: entry.files for name, entry in record.collections.items()}
        guard.record.reset(counts, {name: file_hashes(paths.store / "collections" / name, known.get(name, {}))
                                    for name in counts})
    return problems


def _refuse(paths: StorePaths, problems: list[Problem], note: str = "") -> None:
    if not problems:
        return
    raise StorageUnavailable(refusal(paths, problems, note))
