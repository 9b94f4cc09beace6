"""API-key authentication: a bearer key resolves to exactly one tenant and role, or to the platform."""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.errors import ConfigError, Forbidden, Unauthenticated
from gateway.tenancy.config import Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry

log = logging.getLogger("gateway")
_RANK = {Role.READER: 0, Role.WRITER: 1, Role.ADMIN: 2}
# The platform principal's tenant: no tenant can have it ('_' cannot start a tenant id).
PLATFORM = "_platform"


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller. The tenant comes from the key and from nothing else.

    The platform operator (GATEWAY_PLATFORM_KEY_SHA256) is `platform=True` with tenant `_platform`:
    it manages tenants and keys, and can read no tenant's data.
    """

    tenant: str
    role: Role
    platform: bool = False
    # Set for a key bound to one user (api_keys[].user_id): its memories are the only ones it sees.
    user_id: str | None = None

    def require(self, role: Role, action: str) -> None:
        if _RANK[self.role] < _RANK[role]:
            allowed_roles = ", ".join(r.value for r in Role if _RANK[r] >= _RANK[role])
            raise Forbidden(f"role {self.role.value!r} of tenant {self.tenant!r} may not {action}; "
                            f"allowed roles: {allowed_roles}")


PLATFORM_PRINCIPAL = Principal(PLATFORM, Role.ADMIN, platform=True)
_NOBODY = Principal("", Role.READER)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def unset_key(tenant: TenantConfig, index: int) -> str:
    return (f"tenant {tenant.id!r} api_keys[{index}] refers to environment variable "
            f"{tenant.api_keys[index].env!r}, which is not set")


def key_problems(tenants: Iterable[TenantConfig], environ: Mapping[str, str], *,
                 platform_sha256: str | None = None) -> list[tuple[str, str, str]]:
    """(tenant id, key, message) for everything about keys that stops start-up, for every tenant at
    once (`gateway check-config`): `env` variables that are not set, and keys that are another
    tenant's, repeated with two roles, or the platform key. The messages are the authenticator's."""
    checker = ApiKeyAuthenticator(TenantRegistry({}), environ, platform_sha256=platform_sha256)
    found = []
    for tenant in tenants:
        unset = [index for index, entry in enumerate(tenant.api_keys) if entry.env is not None and not environ.get(entry.env)]
        found += [(tenant.id, f"api_keys.{index}", unset_key(tenant, index)) for index in unset]
        if unset:
            continue
        problem = checker.conflict(tenant)
        if problem is not None:
            found.append((tenant.id, "api_keys", problem))
        else:
            checker._add(checker._keys, tenant, strict=True)
    return found


class ApiKeyAuthenticator:
    """Maps sha256(key) to a principal; env-referenced keys are hashed when their tenant is loaded.

    Follows the registry: a tenant created, changed, deactivated or removed changes its keys here
    before the registry's change returns, so a revoked key is refused by the next request.
    """

    def __init__(self, registry: TenantRegistry, environ: Mapping[str, str], *,
                 platform_sha256: str | None = None) -> None:
        self._registry = registry
        self._environ = environ
        self._platform = platform_sha256
        self._write = threading.Lock()
        # Copy-on-write, like the registry: authenticate() reads without a lock.
        self._keys: dict[str, Principal] = {}
        self._by_tenant: dict[str, frozenset[str]] = {}
        for tenant in registry:
            self._add(self._keys, tenant, strict=True)
        registry.subscribe(self._changed)

    def digests(self, tenant: TenantConfig) -> list[str]:
        """Every key digest of `tenant` (env keys read now); ConfigError for an unset variable."""
        found = []
        for index, entry in enumerate(tenant.api_keys):
            if entry.env is not None:
                value = self._environ.get(entry.env)
                if not value:
                    raise ConfigError(unset_key(tenant, index))
                found.append(key_digest(value))
            else:
                found.append(entry.sha256)  # type: ignore[arg-type]
        return found

    def conflict(self, tenant: TenantConfig) -> str | None:
        """Why `tenant`'s keys cannot be added (a key of another tenant, or the platform key), or None."""
        own: dict[str, Principal] = {}
        for index, (digest, entry) in enumerate(zip(self.digests(tenant), tenant.api_keys)):
            if self._platform is not None and hmac.compare_digest(digest, self._platform):
                return f"tenant {tenant.id!r} api_keys[{index}] is the platform key; a tenant key must differ"
            other = own.get(digest) or self._keys.get(digest)
            own.setdefault(digest, Principal(tenant.id, entry.role))
            # Otherwise the later entry would silently win: a key names one tenant and one role.
            if other is not None and (other.tenant != tenant.id or other is own[digest]):
                return (f"tenant {tenant.id!r} api_keys[{index}] is also a key of tenant {other.tenant!r} "
                        f"(role {other.role.value!r}); a key must identify exactly one tenant and role")
        return None

    def _add(self, keys: dict[str, Principal], tenant: TenantConfig, *, strict: bool) -> None:
        problem = self.conflict(tenant)
        if problem is not None:
            if strict:
                raise ConfigError(problem)
            # A reloaded file took another tenant's key: the key keeps its owner, this tenant loses it.
            log.error("tenant %r: %s; its keys are not accepted until this is fixed", tenant.id, problem)
            return
        digests = self.digests(tenant)
        for digest, entry in zip(digests, tenant.api_keys):
            keys[digest] = Principal(tenant.id, entry.role, user_id=entry.user_id)
        self._by_tenant[tenant.id] = frozenset(digests)

    def _changed(self, tenant_id: str) -> None:
        with self._write:
            keys = dict(self._keys)
            for digest in self._by_tenant.pop(tenant_id, ()):
                if keys.get(digest, _NOBODY).tenant == tenant_id:
                    del keys[digest]
            if tenant_id in self._registry:
                try:
                    self._add(keys, self._registry.get(tenant_id), strict=False)
                except ConfigError as exc:
                    log.error("tenant %r: %s; its keys are not accepted until this is fixed", tenant_id, exc.message)
            self._keys = keys

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise Unauthenticated("missing Authorization header; send 'Authorization: Bearer <api key>'")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("Authorization header must be 'Bearer <api key>'")
        # Looking up the digest (not the key) leaks nothing usable through timing.
        digest = key_digest(key.strip())
        if self._platform is not None and hmac.compare_digest(digest, self._platform):
            return PLATFORM_PRINCIPAL
        principal = self._keys.get(digest)
        if principal is None:
            raise Unauthenticated("unknown API key")
        tenant = self._registry.get(principal.tenant) if principal.tenant in self._registry else None
        if tenant is None or not tenant.active:
            raise Forbidden(f"tenant {principal.tenant!r} is deactivated; its keys are refused until a platform "
                            "operator activates it (updateTenant active: true)")
        return principal
