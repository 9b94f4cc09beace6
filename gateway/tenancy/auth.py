"""API-key authentication: a bearer key resolves to exactly one tenant and role."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.errors import ConfigError, Forbidden, Unauthenticated
from gateway.tenancy.config import Role
from gateway.tenancy.registry import TenantRegistry

_RANK = {Role.READER: 0, Role.WRITER: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller. The tenant comes from the key and from nothing else."""

    tenant: str
    role: Role

    def require(self, role: Role, action: str) -> None:
        if _RANK[self.role] < _RANK[role]:
            allowed_roles = ", ".join(r.value for r in Role if _RANK[r] >= _RANK[role])
            raise Forbidden(f"role {self.role.value!r} of tenant {self.tenant!r} may not {action}; "
                            f"allowed roles: {allowed_roles}")


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiKeyAuthenticator:
    """Maps sha256(key) to a principal; env-referenced keys are hashed once at start-up."""

    def __init__(self, registry: TenantRegistry, environ: Mapping[str, str]) -> None:
        self._keys: dict[str, Principal] = {}
        for tenant in registry:
            for index, entry in enumerate(tenant.api_keys):
                if entry.env is not None:
                    value = environ.get(entry.env)
                    if not value:
                        raise ConfigError(f"tenant {tenant.id!r} api_keys[{index}] refers to environment variable "
                                          f"{entry.env!r}, which is not set")
                    digest = key_digest(value)
                else:
                    digest = entry.sha256  # type: ignore[assignment]
                other = self._keys.get(digest)
                if other is not None:
                    # Otherwise the later entry would silently win: a key names one tenant and one role.
                    raise ConfigError(f"tenant {tenant.id!r} api_keys[{index}] is also a key of tenant "
                                      f"{other.tenant!r} (role {other.role.value!r}); "
                                      "a key must identify exactly one tenant and role")
                self._keys[digest] = Principal(tenant.id, entry.role)

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise Unauthenticated("missing Authorization header; send 'Authorization: Bearer <api key>'")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("Authorization header must be 'Bearer <api key>'")
        # Looking up the digest (not the key) leaks nothing usable through timing.
        principal = self._keys.get(key_digest(key.strip()))
        if principal is None:
            raise Unauthenticated("unknown API key")
        return principal
