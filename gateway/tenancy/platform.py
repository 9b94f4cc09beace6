"""The platform operator's tenant lifecycle: create, update, (de)activate, delete, keys.

Every change is validated like a tenant file, then checked against what exists (ids, keys, the
files GitOps owns), then persisted (gateway/tenancy/persisted.py), and only then applied to this
process's registry; other workers and replicas apply it from the store within a poll interval.
A change that fails any check changes nothing. Blocking: call from async code via a thread.

Precedence: a tenant defined by a YAML file belongs to GitOps. The API refuses to change or
delete it, and refuses to create an API tenant with its id (TENANT_CONFLICT, naming the file).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.conversations.identifiers import check_user_id
from gateway.errors import InvalidInput, TenantConflict, UnknownApiKey, UnknownTenant, allowed
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope, physical_name
from gateway.tenancy.auth import ApiKeyAuthenticator, key_digest
from gateway.tenancy.config import SHA256_HEX, ApiKeyConfig, Role, TenantConfig
from gateway.tenancy.loader import ConfigProblem, check_tenant
from gateway.tenancy.persisted import TenantStore
from gateway.tenancy.registry import TenantRegistry

log = logging.getLogger("gateway.audit")
# Tenants per `tenants` page: a page carries each tenant's config.
MAX_PAGE = 1000
# Bytes of randomness in a generated key (256 bits), rendered url-safe.
_KEY_BYTES = 32
# Per-tenant record collections besides the chunk and parent ones: (scope namespace, scope
# collection, kind) as gateway/jobs/store.py and gateway/conversations/turns.py name them.
_RECORDS = (("_jobs", "jobs", "j", "ingest jobs"), ("_conversations", "turns", "t", "conversation turns"))
# Companions of each collection: token vectors (storage/token_vectors.py), edges (storage/edges.py).
_COMPANIONS = (("t", "token vectors"), ("e", "graph edges"))


@dataclass(frozen=True, slots=True)
class KeyInfo:
    id: str
    role: Role
    user_id: str | None = None  # the user a reader or writer key is bound to (api_keys[].user_id)


@dataclass(frozen=True, slots=True)
class TenantInfo:
    """One tenant as the platform API lists it; never key material beyond the key's id."""

    config: TenantConfig
    source: str          # "api", or the tenant file's path
    keys: tuple[KeyInfo, ...]


@dataclass(frozen=True, slots=True)
class NewKey:
    tenant: str
    id: str
    role: Role
    key: str | None      # the generated key, returned once; None when a digest was given


@dataclass(frozen=True, slots=True)
class Removal:
    """One physical collection a tenant deletion drops (or, shared, deletes the tenant's rows from)."""

    what: str            # e.g. "docs/faq chunks", "ingest jobs"
    collection: str      # the Milvus collection
    rows: int


@dataclass(frozen=True, slots=True)
class Deletion:
    tenant: str
    dry_run: bool
    removals: tuple[Removal, ...]
    keys: int


def _problems_message(problems: Sequence[ConfigProblem]) -> str:
    return f"{len(problems)} problem(s) in the tenant config: " + "; ".join(str(p) for p in problems)


class Platform:
    """Tenant lifecycle for the platform operator (one instance per process)."""

    def __init__(self, registry: TenantRegistry, tenants: TenantStore, store: MilvusStore,
                 authenticator: ApiKeyAuthenticator, *, max_limit: int | None = None,
                 engine_problems: Callable[[TenantConfig], list[str]] = lambda tenant: []) -> None:
        self._registry = registry
        self._tenants = tenants
        self._store = store
        self._auth = authenticator
        self._max_limit = max_limit
        self._engine_problems = engine_problems
        # One change at a time in this process: a check and its write see the same registry.
        self._lock = threading.Lock()

    # -- reads -----------------------------------------------------------------------------

    def list(self, first: int = 100, after: str | None = None) -> tuple[list[TenantInfo], int]:
        """A page of tenants in id order after `after`, and how many tenants there are."""
        if not 1 <= first <= MAX_PAGE:
            raise InvalidInput(f"tenants: first {first} is out of range; allowed: 1 to {MAX_PAGE}")
        ids = sorted(t.id for t in self._registry if after is None or t.id > after)[:first]
        return [self._info(self._registry.get(i)) for i in ids if i in self._registry], len(self._registry)

    def get(self, tenant_id: str) -> TenantInfo:
        return self._info(self._known(tenant_id))

    def _info(self, tenant: TenantConfig) -> TenantInfo:
        origin = self._registry.origin(tenant.id)
        return TenantInfo(tenant, "api" if origin is None else str(origin),
                          tuple(KeyInfo(k.key_id or f"env:{k.env}", k.role, k.user_id) for k in tenant.api_keys))

    # -- changes ---------------------------------------------------------------------------

    def create(self, raw: object) -> TenantConfig:
        tenant = self._validate(raw, "createTenant")
        with self._lock:
            if tenant.id in self._registry:
                raise TenantConflict(f"tenant {tenant.id!r} already exists ({self._owner(tenant.id)}); "
                                     "choose another id, or updateTenant to change it")
            return self._commit(tenant, "create")

    def update(self, tenant_id: str, raw: object) -> TenantConfig:
        """Replace an API tenant's config with `raw` (the whole config; its `id` must be `tenant_id`)."""
        if isinstance(raw, dict) and raw.get("id", tenant_id) != tenant_id:
            raise InvalidInput(f"updateTenant: config id {raw.get('id')!r} differs from the tenant {tenant_id!r}; "
                               "a tenant's id cannot change (create a new tenant instead)")
        tenant = self._validate({**raw, "id": tenant_id} if isinstance(raw, dict) else raw, "updateTenant")
        with self._lock:
            current = self._api_tenant(tenant_id, "update")
            if tenant.isolation is not current.isolation:
                raise InvalidInput(f"updateTenant: isolation {tenant.isolation.value!r} differs from the tenant's "
                                   f"{current.isolation.value!r}; stored data cannot move: delete the tenant and "
                                   "create it again")
            return self._commit(tenant, "update")

    def set_active(self, tenant_id: str, active: bool) -> TenantConfig:
        with self._lock:
            current = self._api_tenant(tenant_id, "activate" if active else "deactivate")
            return self._commit(current.model_copy(update={"active": active}),
                                "activate" if active else "deactivate")

    def add_key(self, tenant_id: str, role: Role, sha256: str | None = None, user_id: str | None = None) -> NewKey:
        """Add a key by its digest, or generate one (returned once, only its digest is kept); `user_id`
        binds it to that user's memories (docs/conversations.md)."""
        if user_id is not None:
            check_user_id(user_id)
            if role is Role.ADMIN:
                raise InvalidInput(f"addApiKey: userId {user_id!r} with role admin; an admin manages the whole "
                                   "tenant, so only reader and writer keys can be bound to a user")
        key = None
        if sha256 is None:
            key = secrets.token_urlsafe(_KEY_BYTES)
            sha256 = key_digest(key)
        elif not SHA256_HEX.match(sha256):
            raise InvalidInput(f"addApiKey: sha256 {sha256!r} is not a key digest; allowed: 64 lowercase hex "
                               "characters (sha256 of the key, e.g. `printf %s \"$KEY\" | sha256sum`), or omit it "
                               "and the gateway generates a key")
        with self._lock:
            current = self._api_tenant(tenant_id, "add a key to")
            entry = ApiKeyConfig(sha256=sha256, role=role, user_id=user_id)
            if any(k.key_id == entry.key_id for k in current.api_keys):
                raise TenantConflict(f"addApiKey: tenant {tenant_id!r} already has key {entry.key_id!r}; "
                                     "a key is added once (revokeApiKey it first to change its role)")
            self._commit(current.model_copy(update={"api_keys": (*current.api_keys, entry)}), "add key")
        return NewKey(tenant_id, entry.key_id or "", role, key)

    def revoke_key(self, tenant_id: str, key_id: str) -> TenantConfig:
        with self._lock:
            current = self._api_tenant(tenant_id, "revoke a key of")
            kept = tuple(k for k in current.api_keys if k.key_id != key_id)
            if len(kept) == len(current.api_keys):
                raise UnknownApiKey(f"revokeApiKey: tenant {tenant_id!r} has no API key {key_id!r}; its key ids: "
                                    f"{allowed(k.key_id for k in current.api_keys if k.key_id)}")
            return self._commit(current.model_copy(update={"api_keys": kept}), f"revoke key {key_id}")

    def delete(self, tenant_id: str, *, dry_run: bool) -> Deletion:
        """What deleting the tenant removes; without `dry_run`, remove it: data first, then the entry."""
        with self._lock:
            current = self._api_tenant(tenant_id, "delete")
            removals = self._removals(current)
            if not dry_run:
                # Deactivated first: no request of the tenant writes while its data goes, and if a drop
                # fails the tenant is still there (inactive) for the operator to delete again.
                if current.active:
                    self._commit(current.model_copy(update={"active": False}), "deactivate (deleting)")
                data = set()
                for scope in (ref.scope for ref in _refs(current)):
                    where = self._store.physical(scope)
                    data |= {where.chunks, where.parents}
                    self._store.drop(scope)  # a shared collection keeps the other tenants' rows
                for removal in removals:
                    if removal.collection not in data:
                        self._store.drop_records(removal.collection)
                self._tenants.delete(tenant_id)
                self._registry.remove(tenant_id)
                log.info("platform: delete tenant %r: %d collection(s) dropped", tenant_id, len(removals))
            return Deletion(tenant_id, dry_run, tuple(removals), len(current.api_keys))

    # -- checks ----------------------------------------------------------------------------

    def _validate(self, raw: object, call: str) -> TenantConfig:
        tenant, problems = check_tenant(raw, call, max_limit=self._max_limit)
        if tenant is not None:
            problems = [ConfigProblem(call, key, message) for key, message in _api_problems(tenant)]
            problems += [ConfigProblem(call, "isolation", p) for p in self._engine_problems(tenant)]
        if problems or tenant is None:
            raise InvalidInput(_problems_message(problems))
        return tenant

    def _known(self, tenant_id: str) -> TenantConfig:
        if tenant_id not in self._registry:
            raise UnknownTenant(f"tenant {tenant_id!r} does not exist; {len(self._registry)} tenant(s) do "
                                "(list them with `tenants`)")
        return self._registry.get(tenant_id)

    def _api_tenant(self, tenant_id: str, action: str) -> TenantConfig:
        tenant = self._known(tenant_id)
        origin = self._registry.origin(tenant_id)
        if origin is not None:
            raise TenantConflict(f"tenant {tenant_id!r} is defined in {origin} (GitOps); the platform API may not "
                                 f"{action} it: change or remove that file")
        return tenant

    def _owner(self, tenant_id: str) -> str:
        origin = self._registry.origin(tenant_id)
        return "created through the platform API" if origin is None else f"defined in {origin}"

    def _commit(self, tenant: TenantConfig, action: str) -> TenantConfig:
        conflict = self._auth.conflict(tenant)
        if conflict is not None:
            raise TenantConflict(conflict)
        self._tenants.save(tenant)  # a store failure here leaves everything as it was
        self._registry.put(tenant)
        log.info("platform: %s tenant %r", action, tenant.id)
        return tenant

    def _removals(self, tenant: TenantConfig) -> list[Removal]:
        """Collections of the tenant that exist, with their rows (chunk/parent rows of shared ones)."""
        found = []
        guard = self._store.guard
        for ref in _refs(tenant):
            where = self._store.physical(ref.scope)
            if self._store.exists(ref.scope):
                found.append(Removal(f"{ref.label} chunks", where.chunks, self._store.count(ref.scope)))
                if not where.shared and guard.has_collection(where.parents):
                    found.append(Removal(f"{ref.label} parents", where.parents, guard.count_rows(where.parents)))
            for kind, what in _COMPANIONS:
                name = physical_name(ref.scope, kind)
                if guard.has_collection(name):
                    found.append(Removal(f"{ref.label} {what}", name, guard.count_rows(name)))
        for namespace, collection, kind, what in _RECORDS:
            name = physical_name(Scope(tenant.id, namespace, collection), kind)
            if guard.has_collection(name):
                found.append(Removal(what, name, guard.count_rows(name)))
        return found


def _refs(tenant: TenantConfig):
    return TenantRegistry({tenant.id: tenant}).collections(tenant.id)


def _api_problems(tenant: TenantConfig) -> list[tuple[str, str]]:
    """What a tenant file may say and an API tenant may not: things read from one machine."""
    found = []
    for index, key in enumerate(tenant.api_keys):
        if key.env is not None:
            found.append((f"api_keys.{index}.env", f"env {key.env!r} is read from each process's environment, "
                          "which the platform API cannot set; allowed: sha256 (or addApiKey)"))
    if tenant.operations.manifest is not None:
        found.append(("operations.manifest", f"manifest {tenant.operations.manifest!r} is a file beside the tenant "
                      "files; allowed for tenant files only"))
    if tenant.seed:
        found.append(("seed", "seed corpora are files ingested at start-up; allowed for tenant files only "
                      "(ingest with upsertDocuments or startIngestJob)"))
    return found
