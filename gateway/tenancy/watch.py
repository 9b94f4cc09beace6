"""Keep the registry current: API tenants from the store, YAML tenants from the directory.

Every `interval_s` one background thread asks the store for tenant versions written since the
newest it saw (gateway/tenancy/persisted.py) and compares the tenant files' (mtime, size) with
the last scan. A changed file is validated alone: a good one replaces its tenant, a bad one
keeps the tenant's previous config and its problems are logged and reported (`problems()`,
which /readyz shows), until the file is fixed. A removed file removes its tenant (its data
stays in Milvus). No new dependency: polling, not inotify.

Precedence: a tenant file wins over an API tenant of the same id (GitOps owns the id); the
platform API refuses to create such a tenant, so this only happens when a file is added for an
id the API created, and is logged.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import GatewayError
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.loader import ConfigProblem, read_tenant_file, remembered_stamp
from gateway.tenancy.persisted import TenantStore
from gateway.tenancy.registry import Origin, TenantRegistry

log = logging.getLogger("gateway")
_SUFFIXES = (".yaml", ".yml")
# A stat of every file costs about 20 µs each (0.4 s for 20,000 files on a busy 2-core host), too
# much for every poll. Each poll compares the directory's mtime, which changes when a file is
# added, removed or replaced by a rename (editors, git, Kubernetes ConfigMap updates); a file
# rewritten in place, which leaves the directory alone, is found by the full scan this often.
FULL_SCAN_S = 30.0


@dataclass(frozen=True, slots=True)
class _Seen:
    stamp: tuple[int, int]        # (mtime_ns, size)
    tenant: str | None            # the tenant the file defines now (its last good version)


def scan(directory: Path, known: Callable[[str], tuple[int, int] | None] = lambda path: None
         ) -> dict[str, tuple[int, int]]:
    """Tenant files (by path, a str: hashing and comparing 20,000 Paths was 0.3 s a scan) and their
    (mtime_ns, size); one directory listing, one stat a file (none for a file `known` gives the
    stamp of)."""
    if directory.is_file():
        stat = directory.stat()
        return {str(directory): (stat.st_mtime_ns, stat.st_size)}
    found = {}
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return {}
    for entry in entries:
        if entry.name.endswith(_SUFFIXES) and entry.is_file():
            path = entry.path
            stamp = known(path)
            if stamp is None:
                try:
                    stat = entry.stat()
                except OSError:
                    continue  # removed between the listing and the stat: the next scan sees it gone
                stamp = (stat.st_mtime_ns, stat.st_size)
            found[path] = stamp
    return found


def _mtime(directory: Path) -> int | None:
    try:
        return directory.stat().st_mtime_ns
    except OSError:
        return None


class TenantSync:
    """Applies tenant changes from the store and the tenant directory to one registry."""

    def __init__(self, registry: TenantRegistry, directory: Path, *, store: TenantStore | None = None,
                 max_limit: int | None = None, interval_s: float = 1.0) -> None:
        self._registry = registry
        self._directory = directory
        self._store = store
        self._max_limit = max_limit
        self._interval = interval_s
        self._files: dict[str, _Seen] = {}
        self._problems: dict[str, list[ConfigProblem]] = {}
        self._applied: dict[str, int] = {}   # API tenant id -> version applied
        self._api: dict[str, TenantConfig] = {}  # API tenants as stored, shadowed ones included
        self._cursor = 0
        self._directory_stamp: int | None = None
        self._scanned_at = 0.0
        self._markers: frozenset[str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_poll_s = 0.0

    # -- start-up ----------------------------------------------------------------------------

    def adopt_files(self) -> None:
        """Take the registry's tenants as loaded from the directory now (their files as scanned)."""
        by_file = {str(self._registry.origin(t.id)): t.id for t in self._registry}
        self._directory_stamp = _mtime(self._directory)
        self._scanned_at = time.monotonic()
        # The stamps the loader saw when it read the files just now: no second stat of each file.
        self._files = {path: _Seen(stamp, by_file.get(path))
                       for path, stamp in scan(self._directory, remembered_stamp).items()}

    def load_store(self) -> int:
        """Read every API tenant from the store into the registry; returns how many."""
        if self._store is None:
            return 0
        self._markers = self._store.markers()  # before the read: a write after it shows a new marker
        self._apply_versions(self._store.all())
        return len(self._api)

    # -- polling -----------------------------------------------------------------------------

    def poll(self, *, full_scan: bool = False) -> None:
        """One round: store changes, then file changes (every file's stat with `full_scan`, else only
        when the directory changed or FULL_SCAN_S passed)."""
        started = time.perf_counter()
        if self._store is not None:
            try:
                markers = self._store.markers()
                # Unchanged markers: no tenant row was written since the last poll (the cheap, usual case).
                if markers is not None and not (markers <= (self._markers or frozenset())):
                    versions = self._store.since(self._cursor, self._applied)
                    self._apply_versions(self._store.all() if versions is None else versions)
                self._markers = markers
            except GatewayError as exc:
                log.warning("tenant registry: cannot read tenant changes from the store: %s", exc.message)
        self._reload_files(full=full_scan)
        self.last_poll_s = time.perf_counter() - started

    def problems(self) -> list[ConfigProblem]:
        """Problems of tenant files whose last change was refused (their previous config serves)."""
        return [p for found in self._problems.values() for p in found]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gateway-tenant-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.poll()
            except Exception:  # the thread must outlive one bad round; the next one tries again
                log.exception("tenant registry: a sync round failed")

    # -- store -------------------------------------------------------------------------------

    def _apply_versions(self, versions) -> None:
        changes: dict[str, tuple[TenantConfig, Origin] | None] = {}
        for version in versions:
            self._cursor = max(self._cursor, version.version)
            if self._applied.get(version.tenant_id, -1) >= version.version:
                continue
            self._applied[version.tenant_id] = version.version
            owner = self._registry.origin(version.tenant_id) if version.tenant_id in self._registry else None
            if owner is not None:
                log.warning("tenant %r: the platform API's version is ignored: %s defines this tenant (GitOps "
                            "wins)", version.tenant_id, owner)
                if version.config is not None:
                    self._api[version.tenant_id] = version.config
                continue
            if version.config is None:
                self._api.pop(version.tenant_id, None)
                changes[version.tenant_id] = None
            else:
                self._api[version.tenant_id] = version.config
                changes[version.tenant_id] = (version.config, None)
        if changes:
            self._registry.apply(changes)

    # -- files -------------------------------------------------------------------------------

    def _reload_files(self, *, full: bool = False) -> None:
        stamp = _mtime(self._directory)
        if not full and stamp == self._directory_stamp and time.monotonic() - self._scanned_at < FULL_SCAN_S:
            return
        self._directory_stamp, self._scanned_at = stamp, time.monotonic()
        now = scan(self._directory)
        for path in [p for p in self._files if p not in now]:
            seen = self._files.pop(path)
            self._problems.pop(path, None)
            if seen.tenant is not None and str(self._registry.origin(seen.tenant)) == path:
                api = self._api.get(seen.tenant)
                self._registry.apply({seen.tenant: (api, None) if api is not None else None})
                log.info("tenant %r: %s was removed; the tenant is gone (its data stays in Milvus)", seen.tenant, path)
        for path, stamp in now.items():
            seen = self._files.get(path)
            if seen is not None and seen.stamp == stamp:
                continue
            self._reload(path, stamp, seen.tenant if seen is not None else None)

    def _reload(self, name: str, stamp: tuple[int, int], previous: str | None) -> None:
        path = Path(name)
        tenant, problems = read_tenant_file(path, max_limit=self._max_limit)
        if tenant is not None:
            owner = self._registry.origin(tenant.id) if tenant.id in self._registry else None
            if owner is not None and owner != path:
                problems = [ConfigProblem(path, "id", f"tenant {tenant.id!r} is already defined in {owner}")]
        if problems or tenant is None:
            self._files[name] = _Seen(stamp, previous)
            self._problems[name] = problems
            kept = f"tenant {previous!r} keeps its previous config" if previous else "no tenant was added"
            log.error("tenant file %s was not applied (%s): %s", path, kept, "; ".join(str(p) for p in problems))
            return
        changes: dict[str, tuple[TenantConfig, Origin] | None] = {tenant.id: (tenant, path)}
        if previous is not None and previous != tenant.id:
            changes[previous] = None  # the file now defines another id
        if tenant.id in self._api:
            log.warning("tenant %r: %s now defines this tenant; it wins over the platform API's version",
                        tenant.id, path)
        self._registry.apply(changes)
        self._files[name] = _Seen(stamp, tenant.id)
        self._problems.pop(name, None)
        log.info("tenant %r reloaded from %s", tenant.id, path)
