"""The long-lived parts of a gateway process, built once from settings."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.embedding.base import CachedEmbedder
from gateway.embedding.factory import build_embedder
from gateway.settings import Settings
from gateway.errors import ConfigError, StoreRefused
from gateway.storage.capabilities import Capabilities, capability_problems, lite_capabilities
from gateway.storage.indexes import DenseIndexKind
from gateway.storage.integrity import Problem, check_files, collection_dirs, file_hashes, record_hint, refusal
from gateway.storage.milvus import MilvusStore, is_embedded
from gateway.storage.schema import Isolation, Layout
from gateway.storage.record import RecordError, RecordSnapshot, StorePaths, read_record
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.loader import ParsedFiles, load_tenant_files
from gateway.tenancy.persisted import TenantStore
from gateway.tenancy.watch import TenantSync
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
    # API tenants in the store, and what keeps the registry current (gateway/tenancy/watch.py).
    tenant_store: TenantStore | None = None
    sync: TenantSync | None = None

    def close(self) -> None:
        self.store.close()
        self.tokens.close()

    def token_store_for(self, ref: CollectionRef) -> TokenTarget | None:
        """Where ingest writes token vectors: only for tenants whose pipelines rerank with them."""
        return token_target(self.registry, self.tokens, ref.scope.tenant)


def token_target(registry: TenantRegistry, tokens: TokenVectorStore | None, tenant: str) -> TokenTarget | None:
    limit = registry.get(tenant).late_interaction_tokens
    return TokenTarget(tokens, limit) if tokens is not None and limit is not None else None


def build_runtime(settings: Settings, *, verifying: bool = False) -> Runtime:
    """Tenants first (cheap, and the likeliest mistake), then the model, then Milvus.

    `verifying`: `gateway verify` opens a milvus-lite store that has no record (see `open_store`)."""
    tenants, origins = load_tenant_files(settings.tenants_dir, max_limit=settings.max_limit,
                                         parsed=parsed_tenant_files(settings))
    registry = TenantRegistry(tenants, origins)
    _refuse_engine(engine_problems(settings, registry))  # milvus-lite: before anything is opened
    embedder = build_embedder(settings)
    store = open_store(settings, dim=embedder.dim, layout=Layout.of((t.id, t.isolation) for t in registry),
                       verifying=verifying)
    try:
        _refuse_engine(engine_problems(settings, registry, store.capabilities))
    except ConfigError:
        store.close()
        raise
    if not store.capabilities.known_release:
        log.warning("Milvus version %r names no release; BM25 and partition keys are assumed to be there",
                    store.capabilities.version)
    log.info("milvus: %s", store.capabilities.describe())
    tokens = TokenVectorStore(store, cache_bytes=settings.token_cache_mb * 1024 * 1024)
    follow_layout(registry, store)
    tenant_store = TenantStore(store)
    sync = TenantSync(registry, settings.tenants_dir, store=tenant_store, max_limit=settings.max_limit,
                      interval_s=settings.tenant_sync_interval_ms / 1000)
    sync.adopt_files()
    try:
        loaded = sync.load_store()
    except BaseException:
        store.close()
        raise
    if loaded:
        log.info("tenants: %d from %s, %d from the platform API", len(tenants), settings.tenants_dir, loaded)
    return Runtime(settings=settings, registry=registry, embedder=embedder, store=store, tokens=tokens,
                   tenant_store=tenant_store, sync=sync)


def parsed_tenant_files(settings: Settings) -> ParsedFiles | None:
    """The parsed-files cache beside a milvus-lite store; none for a Milvus server (no local store)."""
    if not is_embedded(settings.milvus_uri):
        return None
    return ParsedFiles(StorePaths.of(settings.milvus_uri).tenant_cache)


def follow_layout(registry: TenantRegistry, store: MilvusStore) -> None:
    """Tenants added at runtime with `isolation: partition_key` join the shared collections' layout."""
    def changed(tenant_id: str) -> None:
        shared = set(store.layout.shared_tenants)
        if tenant_id in registry and registry.get(tenant_id).isolation is Isolation.PARTITION_KEY:
            shared.add(tenant_id)
        else:
            shared.discard(tenant_id)
        store.layout = Layout(frozenset(shared))

    registry.subscribe(changed)


def engine_problems(settings: Settings, tenants: Iterable[TenantConfig],
                    capabilities: Capabilities | None = None) -> list[str]:
    """What the tenants ask of Milvus that the engine cannot do. Without detected capabilities,
    what the URI alone tells (a path is milvus-lite), so `gateway check-config` can say it too."""
    if capabilities is None:
        if not is_embedded(settings.milvus_uri):
            return []
        capabilities = lite_capabilities()
    tenants = list(tenants)
    indexes = {f"{t.id}/{namespace}/{name}": c.index.dense.index_type
               for t in tenants for namespace, ns in t.namespaces.items() for name, c in ns.collections.items()
               if c.index.dense is not DenseIndexKind.AUTO}
    return capability_problems(capabilities, {t.id: t.isolation for t in tenants}, uri=settings.milvus_uri,
                               indexes=indexes)


def _refuse_engine(problems: list[str]) -> None:
    if problems:
        raise ConfigError(f"{len(problems)} problem(s) with what the tenants need of Milvus:\n"
                          + "\n".join(f"  {p}" for p in problems))


def open_store(settings: Settings, *, dim: int, layout: Layout = Layout(), verifying: bool = False) -> MilvusStore:
    """Open Milvus; a milvus-lite store is checked against the gateway's record before and after opening.

    Before: files that opening would destroy (gateway/storage/integrity.py). After: each recorded
    collection's row count. Either mismatch refuses to start, naming the file and the restore
    command; a store that is only unexpectedly empty starts with `accept_empty_store`.

    A store that holds collections but has no record (copied without it, or the record deleted) is
    refused too: its bytes cannot be told from what the gateway wrote, and recording it as it is
    would make any damage in it look intact from then on. Only `gateway verify` opens it
    (`verifying`, which records nothing); once its rows check out, `adopt` records the store.
    """
    token = settings.milvus_token.get_secret_value() if settings.milvus_token else None
    uri = settings.milvus_uri
    if not is_embedded(uri):
        return MilvusStore(uri, token=token, dim=dim, layout=layout)
    paths = StorePaths.of(uri)
    try:
        record = read_record(paths.record)
    except RecordError as exc:
        raise RecordError(f"{exc}; {record_hint(paths)}") from exc
    _refuse(paths, check_files(paths, record, accept_empty=settings.accept_empty_store),
            "Nothing was changed on disk. ")
    unrecorded = [] if record.exists else list(collection_dirs(paths.store))
    if unrecorded and not verifying:
        raise StoreRefused(unrecorded_message(paths, len(unrecorded)))
    store = MilvusStore(uri, token=token, dim=dim, layout=layout, max_chunks=settings.embedded_max_chunks or None)
    try:
        problems = _check_counts(store, paths, record, accept_empty=settings.accept_empty_store,
                                 adopt=not unrecorded)
        if problems:
            # Another process (serve's workers, an ingest) may have deleted and recorded rows between
            # our reading the record and counting: compare once more with the record as it is now.
            problems = _check_counts(store, paths, read_record(paths.record), accept_empty=settings.accept_empty_store,
                                     adopt=not unrecorded)
        _refuse(paths, problems)
    except BaseException:
        store.close()
        raise
    return store


def _check_counts(store: MilvusStore, paths: StorePaths, record: RecordSnapshot, *,
                  accept_empty: bool, adopt: bool = True) -> list[Problem]:
    guard = store.guard
    on_disk = set(guard.list_collections())
    counts = {name: guard.count_rows(name) for name in sorted(on_disk)}
    problems = [Problem(paths.store / "collections" / name,
                        f"holds {counts[name]} row(s), but the gateway's record {paths.record} says it held "
                        f"{entry.rows} after its last committed write")
                for name, entry in record.collections.items()
                if name in counts and not entry.accepts(counts[name])]
    if adopt and not problems and (accept_empty or not record.exists or set(record.collections) != on_disk):
        # A first start (nothing on disk yet), or an accepted empty store: record what is there.
        _record(store, paths, counts, {name: entry.files for name, entry in record.collections.items()})
    return problems


def adopt(store: MilvusStore, paths: StorePaths) -> dict[str, int]:
    """Record a milvus-lite store as it is now (`gateway verify` on a store without a record, once
    checked): each collection's row count and the sha256 of its data files. Returns the counts."""
    guard = store.guard
    counts = {name: guard.count_rows(name) for name in sorted(guard.list_collections())}
    _record(store, paths, counts, {})
    return counts


def _record(store: MilvusStore, paths: StorePaths, counts: dict[str, int], known: dict) -> None:
    store.guard.record.reset(counts, {name: file_hashes(paths.store / "collections" / name, known.get(name, {}))
                                      for name in counts})


def unrecorded_message(paths: StorePaths, collections: int) -> str:
    return (f"refusing to open the store {str(paths.store)!r}: it holds {collections} collection(s) but the "
            f"gateway's record {str(paths.record)!r} is missing (the store was copied or moved without it, or it "
            "was deleted), so damage in it cannot be told from what the gateway wrote, and recording it as it is "
            "would hide that damage for good. Nothing was changed on disk. Run `gateway verify` first: it checks "
            "every row and, when it finds no damage, records the store as it is; then start again "
            "(`gateway verify --adopt` records it even with damage found, to repair it by re-ingesting)")


def _refuse(paths: StorePaths, problems: list[Problem], note: str = "") -> None:
    if not problems:
        return
    raise StoreRefused(refusal(paths, problems, note))
