"""Runtime-managed tenants, persisted in Milvus where every worker and replica reads them.

One record collection (`_platform/_registry/tenants`) holds each API tenant's validated config
as JSON. Every save inserts a new version row (`<tenant>/<version>`) and then deletes the
tenant's older rows, as ingest jobs do (gateway/jobs/store.py): a reader between the two sees
both and takes the newest. Deleting a tenant saves a tombstone version, so that pollers learn of
the removal; a later create of the same id is a newer version and replaces it.

Versions are microseconds since the epoch (raised past the last one this process saw), so a
poller asks only for `version > (newest seen - OVERLAP_US)`: rows written since, plus a window
that covers clocks of other replicas running a little behind. Rows already applied are skipped
by their (tenant, version). Two operators changing one tenant at the same moment: the newer
version wins everywhere.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pymilvus import DataType

from gateway.storage.filters import literal
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope, add_placeholder_vector, physical_name, placeholder_index
from gateway.tenancy.auth import PLATFORM
from gateway.tenancy.config import TenantConfig

SCOPE = Scope(PLATFORM, "_registry", "tenants")
NAME = physical_name(SCOPE, "r")
# The change marker: one small row per write. A poll reads the markers of the last
# MARKER_READ_MS (none, usually) and asks for tenant rows only when one it has not seen appears:
# reading rows is what costs on milvus-lite (about 15 ms per 1,000 rows returned), and the tenant
# rows' overlap window would return every row written in the 10 s before the newest one, on every
# poll. The window tolerates writers' clocks up to 5 minutes behind; markers are deleted after
# twice that.
MARKER_SCOPE = Scope(PLATFORM, "_registry", "marker")
MARKER = physical_name(MARKER_SCOPE, "r")
MARKER_READ_MS = 300_000
MARKER_KEEP_MS = 2 * MARKER_READ_MS
_FIELDS = ["id", "tenant_id", "version", "deleted", "config"]
# Replicas' clocks may lag one another; a row written with a version this far below the newest
# one a poller saw is still found. NTP keeps hosts within milliseconds; 10 s is generous.
OVERLAP_US = 10_000_000
# Rows one poll reads; more changed rows than this in one poll interval means a full re-read.
_POLL_LIMIT = 16_384
_MAX_CONFIG = 65_535


@dataclass(frozen=True, slots=True)
class Version:
    """One stored version of a tenant: its config, or None when it was deleted."""

    tenant_id: str
    version: int
    config: TenantConfig | None


def _marker_schema(client):
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("tenant", DataType.VARCHAR, max_length=256)
    schema.add_field("namespace", DataType.VARCHAR, max_length=256)
    schema.add_field("written_at", DataType.INT64)
    add_placeholder_vector(schema)
    return schema


def _schema(client):
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
    schema.add_field("tenant", DataType.VARCHAR, max_length=256)
    schema.add_field("namespace", DataType.VARCHAR, max_length=256)
    schema.add_field("tenant_id", DataType.VARCHAR, max_length=64)
    schema.add_field("version", DataType.INT64)
    schema.add_field("deleted", DataType.BOOL)
    schema.add_field("config", DataType.JSON)
    schema.add_field("updated_at", DataType.INT64)
    add_placeholder_vector(schema)  # rows read by filter only (storage/schema.py)
    return schema


class TenantStore:
    """Save and read the API-managed tenants (blocking: call via offload from async code)."""

    def __init__(self, store: MilvusStore, clock=time.time) -> None:
        self._store = store
        self._clock = clock
        self._last = 0
        self._lock = threading.Lock()

    def _open(self) -> None:
        self._store.ensure_records(SCOPE, NAME, _schema, placeholder_index)
        self._store.ensure_records(MARKER_SCOPE, MARKER, _marker_schema, placeholder_index)

    def markers(self) -> frozenset[str] | None:
        """The change markers written in the last MARKER_READ_MS; None before any tenant was saved.
        A marker not seen before means tenant rows changed."""
        if not self._store.has_records(MARKER):
            return None
        self._open()
        since = int(self._clock() * 1000) - MARKER_READ_MS
        return frozenset(row["id"] for row in self._store.query_records(
            MARKER_SCOPE, MARKER, f"written_at >= {since}", ["id"], limit=_POLL_LIMIT))

    def _version(self) -> int:
        with self._lock:
            self._last = max(int(self._clock() * 1_000_000), self._last + 1)
            return self._last

    def save(self, tenant: TenantConfig) -> int:
        """Store `tenant`'s config as its newest version; returns the version."""
        return self._write(tenant.id, tenant.model_dump(mode="json", exclude_defaults=True), deleted=False)

    def delete(self, tenant_id: str) -> int:
        """Store the tenant's removal (a tombstone); returns its version."""
        return self._write(tenant_id, {}, deleted=True)

    def _write(self, tenant_id: str, config: dict, *, deleted: bool) -> int:
        if len(json.dumps(config)) > _MAX_CONFIG:
            from gateway.errors import InvalidInput

            raise InvalidInput(f"tenant {tenant_id!r}: its config is over {_MAX_CONFIG} bytes as JSON; "
                               "split it into fewer collections or shorter descriptions")
        self._open()
        version = self._version()
        self._store.insert_records(SCOPE, NAME, [{
            "id": f"{tenant_id}/{version:020d}", "tenant_id": tenant_id, "version": version, "deleted": deleted,
            "config": config, "updated_at": version // 1000, "placeholder": [0.0, 0.0]}])
        self._store.delete_records(SCOPE, NAME, f"tenant_id == {literal(tenant_id)} and version < {version}")
        now_ms = int(self._clock() * 1000)
        self._store.insert_records(MARKER_SCOPE, MARKER, [{
            "id": f"{tenant_id}/{version}/{secrets.token_hex(4)}", "written_at": now_ms, "placeholder": [0.0, 0.0]}])
        self._store.delete_records(MARKER_SCOPE, MARKER, f"written_at < {now_ms - MARKER_KEEP_MS}")
        return version

    def all(self) -> list[Version]:
        """The newest version of every tenant ever saved (tombstones included)."""
        if not self._store.has_records(NAME):
            return []
        self._open()
        return _newest(self._store.iterate_records(SCOPE, NAME, "id", _FIELDS))

    def since(self, version: int, applied: Mapping[str, int] | None = None) -> list[Version] | None:
        """Newest versions written after `version` (less OVERLAP_US) and not yet `applied` (tenant id ->
        version); None when there were too many to read in one poll (then read `all()`)."""
        if not self._store.has_records(NAME):
            return []
        self._open()
        rows = self._store.query_records(SCOPE, NAME, f"version > {max(version - OVERLAP_US, 0)}", _FIELDS,
                                         limit=_POLL_LIMIT)
        if len(rows) >= _POLL_LIMIT:
            return None
        if applied:
            # The overlap window reads recent rows again; only unseen versions are parsed and validated.
            rows = [row for row in rows if int(row["version"]) > applied.get(row["tenant_id"], -1)]
        return _newest(rows)


def _newest(rows: Iterable[dict]) -> list[Version]:
    newest: dict[str, dict] = {}
    for row in rows:
        seen = newest.get(row["tenant_id"])
        if seen is None or int(row["version"]) > int(seen["version"]):
            newest[row["tenant_id"]] = row
    return [Version(row["tenant_id"], int(row["version"]), None if row["deleted"] else
                    TenantConfig.model_validate(_json(row["config"])))
            for row in newest.values()]


def _json(value: object) -> dict:
    return json.loads(value) if isinstance(value, (str, bytes)) else dict(value)  # type: ignore[arg-type]
