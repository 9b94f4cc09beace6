"""Platform API fields: the operator's tenant and key lifecycle (platform key only).

A request with the platform key may select only these fields (PLATFORM_FIELDS), and runs outside
any tenant's admission; a tenant key selecting one of them is FORBIDDEN. The resolvers parse,
delegate to gateway/tenancy/platform.py on a thread (each change writes to Milvus), and map.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Annotated, Any

import strawberry
from graphql import DocumentNode, FieldNode, FragmentSpreadNode, InlineFragmentNode, OperationDefinitionNode
from strawberry.scalars import JSON
from strawberry.types import Info

from gateway.errors import Forbidden
from gateway.graphql.context import Context
from gateway.graphql.enums import RoleEnum
from gateway.tenancy import platform as service
from gateway.tenancy.config import Role

PLATFORM_FIELDS = frozenset({"tenants", "tenant", "createTenant", "updateTenant", "deleteTenant", "addApiKey",
                             "revokeApiKey"})
# Introspection is allowed with either kind of key.
_META = frozenset({"__typename", "__schema", "__type"})
_TenantId = Annotated[str, strawberry.argument(description="The tenant's id")]


def _platform(info: Info[Context, None]) -> service.Platform:
    if not info.context.principal.platform:
        raise Forbidden(f"{info.field_name} is a platform operation: send the platform key "
                        "(GATEWAY_PLATFORM_KEY_SHA256), not a tenant's key")
    platform = info.context.platform
    assert platform is not None, "create_app builds the platform service"
    return platform


def refused_fields(document: DocumentNode, operation_name: Any) -> list[str]:
    """Root fields of the operation that the platform key may not select (tenant operations)."""
    fragments = {d.name.value: d for d in document.definitions if d.kind == "fragment_definition"}
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)
                  and (not isinstance(operation_name, str) or not operation_name
                       or (d.name is not None and d.name.value == operation_name))]
    names: list[str] = []

    def collect(selections: Iterable[Any], seen: frozenset[str]) -> None:
        for selection in selections:
            if isinstance(selection, FieldNode):
                names.append(selection.name.value)
            elif isinstance(selection, InlineFragmentNode):
                collect(selection.selection_set.selections, seen)
            elif isinstance(selection, FragmentSpreadNode) and selection.name.value in fragments \
                    and selection.name.value not in seen:
                collect(fragments[selection.name.value].selection_set.selections, seen | {selection.name.value})

    for operation in operations:
        collect(operation.selection_set.selections, frozenset())
    return sorted({n for n in names if n not in PLATFORM_FIELDS and n not in _META})


@strawberry.type(description="An API key of a tenant: its id and role (the key itself is never stored).")
class ApiKeyInfo:
    id: str = strawberry.field(description="The key's id: the first 12 hex digits of its sha256; `env:<VAR>` for a "
                                           "tenant file's env key")
    role: RoleEnum = strawberry.field(description="What the key may do")
    user_id: str | None = strawberry.field(description=(
        "The user the key is bound to: it sees only that user's memories and its own conversations; null: not bound"))


@strawberry.type(name="Tenant", description="A tenant as the platform operator sees it.")
class TenantInfo:
    id: str = strawberry.field(description="The tenant's id")
    description: str = strawberry.field(description="The tenant's description; empty when it has none")
    active: bool = strawberry.field(description="False: the tenant's keys are refused (FORBIDDEN); data is kept")
    source: str = strawberry.field(description=(
        "`api` when the platform API manages the tenant; else the tenant file that defines it (GitOps owns it, "
        "and the platform API refuses to change it)"))
    keys: list[ApiKeyInfo] = strawberry.field(description="The tenant's API keys")
    collections: list[str] = strawberry.field(description="The tenant's collections, as namespace/collection")
    config: JSON = strawberry.field(description=(
        "The tenant's validated config, as a tenant file's keys (defaults left out); updateTenant takes this shape"))

    @classmethod
    def from_domain(cls, info: service.TenantInfo) -> TenantInfo:
        tenant = info.config
        return cls(id=tenant.id, description=tenant.description, active=tenant.active, source=info.source,
                   keys=[ApiKeyInfo(id=k.id, role=k.role, user_id=k.user_id) for k in info.keys],  # type: ignore[arg-type]
                   collections=[f"{n}/{c}" for n, ns in tenant.namespaces.items() for c in ns.collections],
                   config=tenant.model_dump(mode="json", exclude_defaults=True))


@strawberry.type(description="A page of tenants in id order; pass nextAfter as `after` for the next page.")
class TenantPage:
    tenants: list[TenantInfo] = strawberry.field(description="This page's tenants")
    total: int = strawberry.field(description="Tenants in all")
    next_after: str | None = strawberry.field(description="Pass as `after` for the next page; null on the last page")


@strawberry.type(description="A key addApiKey added. `key` is shown once: only its sha256 is kept.")
class NewApiKey:
    tenant: str = strawberry.field(description="The tenant the key belongs to")
    id: str = strawberry.field(description="The key's id, for revokeApiKey")
    role: RoleEnum = strawberry.field(description="What the key may do")
    key: str | None = strawberry.field(description=(
        "The generated key (43 url-safe characters, 256 random bits); null when the call gave a sha256"))


@strawberry.type(description="One collection that deleteTenant drops (or drops the tenant's rows from, when shared).")
class TenantRemoval:
    what: str = strawberry.field(description="What it holds, e.g. `support/docs chunks`, `ingest jobs`")
    collection: str = strawberry.field(description="The Milvus collection")
    rows: int = strawberry.field(description="Rows of the tenant in it")


@strawberry.type(description="What deleteTenant removed, or with dryRun would remove.")
class TenantDeletion:
    tenant: str = strawberry.field(description="The tenant's id")
    dry_run: bool = strawberry.field(description="True: nothing was changed; this is what would go")
    removals: list[TenantRemoval] = strawberry.field(description="The tenant's collections that exist, with rows")
    keys: int = strawberry.field(description="API keys that stop working")

    @classmethod
    def from_domain(cls, d: service.Deletion) -> TenantDeletion:
        return cls(tenant=d.tenant, dry_run=d.dry_run, keys=d.keys,
                   removals=[TenantRemoval(what=r.what, collection=r.collection, rows=r.rows) for r in d.removals])


@strawberry.type
class PlatformQuery:
    @strawberry.field(description=(
        "Tenants from tenant files and the platform API, in id order, `first` at a time after the id `after` "
        "(platform key)."))
    async def tenants(self, info: Info[Context, None],
                      first: Annotated[int, strawberry.argument(description=(
                          "Page size: 1 to 1000 tenants (INVALID_INPUT outside); default 100"))] = 100,
                      after: Annotated[str | None, strawberry.argument(description=(
                          "The last id of the previous page; omit for the first page"))] = None) -> TenantPage:
        page, total = _platform(info).list(first, after)
        tenants = [TenantInfo.from_domain(t) for t in page]
        return TenantPage(tenants=tenants, total=total,
                          next_after=tenants[-1].id if len(tenants) == first and tenants else None)

    @strawberry.field(description="One tenant (platform key); UNKNOWN_TENANT when no tenant has the id.")
    async def tenant(self, info: Info[Context, None], id: _TenantId) -> TenantInfo:
        return TenantInfo.from_domain(_platform(info).get(id))


@strawberry.type
class PlatformMutation:
    @strawberry.mutation(description=(
        "Create a tenant from a config in a tenant file's shape (platform key). Validated like a file: "
        "INVALID_INPUT lists every problem with its key; TENANT_CONFLICT when the id exists. Keys are sha256 "
        "digests (or add them with addApiKey). Every worker and replica serves it within about "
        "GATEWAY_TENANT_SYNC_INTERVAL_MS."))
    async def create_tenant(self, info: Info[Context, None], config: Annotated[JSON, strawberry.argument(
            description="The tenant's config, as a tenant file's keys (id, namespaces, ...)")]) -> TenantInfo:
        platform = _platform(info)
        tenant = await asyncio.to_thread(platform.create, config)
        return TenantInfo.from_domain(platform.get(tenant.id))

    @strawberry.mutation(description=(
        "Replace an API tenant's config, and/or activate or deactivate it (platform key). A tenant defined by a "
        "file is TENANT_CONFLICT: change the file. Nothing changes unless every check passes."))
    async def update_tenant(self, info: Info[Context, None], id: _TenantId,
                            config: Annotated[JSON | None, strawberry.argument(description=(
                                "The whole new config (as `Tenant.config`); omit to change only `active`"))] = None,
                            active: Annotated[bool | None, strawberry.argument(description=(
                                "false: refuse the tenant's keys, keep its data; true: serve it again"))] = None
                            ) -> TenantInfo:
        platform = _platform(info)

        def change() -> None:
            if config is not None:
                raw = dict(config) if isinstance(config, dict) else config
                if active is not None and isinstance(raw, dict):
                    raw["active"] = active
                platform.update(id, raw)
            elif active is not None:
                platform.set_active(id, active)
            else:
                platform.get(id)  # UNKNOWN_TENANT still applies

        await asyncio.to_thread(change)
        return TenantInfo.from_domain(platform.get(id))

    @strawberry.mutation(description=(
        "Delete an API tenant: its registry entry, keys and every collection it has in Milvus (platform key). "
        "dryRun: true lists what would go and changes nothing."))
    async def delete_tenant(self, info: Info[Context, None], id: _TenantId,
                            dry_run: Annotated[bool, strawberry.argument(description=(
                                "List what would be deleted, change nothing"))] = False) -> TenantDeletion:
        platform = _platform(info)
        return TenantDeletion.from_domain(await asyncio.to_thread(lambda: platform.delete(id, dry_run=dry_run)))

    @strawberry.mutation(description=(
        "Add an API key to an API tenant (platform key): give its sha256, or omit it and the gateway generates a "
        "key and returns it once. A sha256 that is not 64 lowercase hex characters is INVALID_INPUT."))
    async def add_api_key(self, info: Info[Context, None], tenant: _TenantId,
                          role: Annotated[RoleEnum, strawberry.argument(description="What the key may do")] = Role.READER,  # type: ignore[assignment]
                          sha256: Annotated[str | None, strawberry.argument(description=(
                              "The key's sha256 hex digest; omit to have a key generated"))] = None,
                          user_id: Annotated[str | None, strawberry.argument(description=(
                              "Bind the key to this user: in memory collections it reads and writes only this "
                              "user's memories (reader and writer keys only); default: not bound"))] = None
                          ) -> NewApiKey:
        platform = _platform(info)
        added = await asyncio.to_thread(platform.add_key, tenant, Role(role.value), sha256, user_id)
        return NewApiKey(tenant=added.tenant, id=added.id, role=added.role, key=added.key)  # type: ignore[arg-type]

    @strawberry.mutation(description=(
        "Revoke one API key of an API tenant by its id (platform key). Refused at once in this process and by "
        "every worker and replica within about GATEWAY_TENANT_SYNC_INTERVAL_MS; UNKNOWN_API_KEY lists the "
        "tenant's key ids."))
    async def revoke_api_key(self, info: Info[Context, None], tenant: _TenantId,
                             key_id: Annotated[str, strawberry.argument(description="The key's id (ApiKeyInfo.id)")]
                             ) -> TenantInfo:
        platform = _platform(info)
        await asyncio.to_thread(platform.revoke_key, tenant, key_id)
        return TenantInfo.from_domain(platform.get(tenant))
