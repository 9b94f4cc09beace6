"""The gateway's own record of what it wrote: collections and their row counts, kept beside the store.

milvus-lite silently starts empty (or deletes files) when its own metadata is damaged, so the
gateway keeps an independent record and checks the store against it before serving. For a
milvus-lite store `x.db` the gateway's files sit beside it (not inside, so that removing or
replacing the store directory does not take the record with it):

    x.db/              milvus-lite's directory
    x.record.json      this record
    x.writes.lock      the write gate a backup closes for its short write pause
    x.record.lock      serialises record updates across processes (serve's workers, `gateway ingest`)
    x.server.json      where `gateway serve`'s milvus-lite server listens and its secret (0600; storage/server.py)
    x.supervisor.lock  held by the one `gateway serve` that supervises that server (storage/server.py)
    x.tenants.json     tenant files as last parsed, so a restart parses only changed ones (a cache)
    x.tokens/          token vectors of older versions (SQLite; they now live in Milvus)

A Milvus server owns its durability (its own WAL and object storage, often several gateway
replicas in front of it), so there is no record for a server URI.

The record is rewritten atomically (temp file, fsync, rename, directory fsync) after every
committed write. A crash between a commit and the record update leaves the record behind by
one write; `min_rows` makes that safe in both directions: an upsert only raises the true count
above `rows`, and before a delete `min_rows` drops to 0 until the delete's flush is recorded.

Several processes write one store (`gateway serve --workers N`, `gateway ingest` while serving),
so every update re-reads the file under an flock and changes only its own collection's entry: a
process never writes back another process's older count.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gateway.errors import StoreRefused

FORMAT = 1


@dataclass(frozen=True, slots=True)
class StorePaths:
    """Where a milvus-lite store and the gateway's files beside it live."""

    store: Path

    @property
    def record(self) -> Path:
        return self.store.with_name(f"{self.store.stem}.record.json")

    @property
    def write_lock(self) -> Path:
        return self.store.with_name(f"{self.store.stem}.writes.lock")

    @property
    def tokens(self) -> Path:
        return self.store.with_name(f"{self.store.stem}.tokens")

    @property
    def record_lock(self) -> Path:
        return self.store.with_name(f"{self.store.stem}.record.lock")

    @property
    def tenant_cache(self) -> Path:
        """Parsed tenant files, so that a restart parses only changed ones (tenancy/loader.py)."""
        return self.store.with_name(f"{self.store.stem}.tenants.json")

    @property
    def server(self) -> Path:
        return self.store.with_name(f"{self.store.stem}.server.json")

    @property
    def supervisor_lock(self) -> Path:
        return self.store.with_name(f"{self.store.stem}.supervisor.lock")

    @classmethod
    def of(cls, uri: str) -> StorePaths:
        return cls(Path(uri).expanduser().resolve())


@dataclass(frozen=True, slots=True)
class CollectionEntry:
    """One physical collection the gateway created: its last committed row count."""

    rows: int
    # The lowest count that is not damage: below `rows` only while a delete is in flight.
    min_rows: int
    updated_at: float = 0.0
    # sha256 of each data/delta file its manifest named at the last commit, by path relative to the
    # collection directory. milvus-lite never rewrites such a file (a flush or compaction writes a new
    # one), so a different hash later means bytes changed on disk.
    files: Mapping[str, str] = field(default_factory=dict)

    def accepts(self, actual: int) -> bool:
        return actual >= self.min_rows


@dataclass(frozen=True, slots=True)
class RecordSnapshot:
    """The record as read from disk."""

    collections: Mapping[str, CollectionEntry] = field(default_factory=dict)
    exists: bool = False

    @property
    def total_rows(self) -> int:
        return sum(entry.rows for entry in self.collections.values())


class RecordError(StoreRefused):
    """The record file itself is unreadable (damage: waiting does not help)."""


class StoreRecord:
    """Reads and atomically rewrites `x.record.json`; safe across threads and processes.

    Each change is a read-modify-write of the file under `x.record.lock`, so two processes that
    commit to different collections (or the same one) never undo each other's entries.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: dict[str, CollectionEntry] = dict(read_record(path).collections)

    @property
    def _file_lock(self) -> Path:
        return self.path.with_name(self.path.name.removesuffix(".record.json") + ".record.lock")

    def snapshot(self) -> RecordSnapshot:
        """The record as it is on disk now (another process may have committed since)."""
        with self._lock:
            snapshot = read_record(self.path)
            self._entries = dict(snapshot.collections)
            return snapshot

    def committed(self, collection: str, rows: int, files: Mapping[str, str] | None = None) -> None:
        entry = CollectionEntry(rows, rows, time.time(), dict(files or {}))
        self._change(lambda entries: entries.__setitem__(collection, entry))

    def files(self, collection: str) -> Mapping[str, str]:
        with self._lock:
            entry = self._entries.get(collection)
            return dict(entry.files) if entry is not None else {}

    def deleting(self, collection: str) -> None:
        def lower(entries: dict[str, CollectionEntry]) -> None:
            current = entries.get(collection)
            if current is not None and current.min_rows != 0:
                entries[collection] = CollectionEntry(current.rows, 0, time.time(), current.files)

        self._change(lower)

    def forget(self, collection: str) -> None:
        self._change(lambda entries: entries.pop(collection, None))

    def reset(self, counts: Mapping[str, int], files: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """Replace the record with what the store holds now (a first start, or `--accept-empty`)."""
        now = time.time()
        fresh = {name: CollectionEntry(rows, rows, now, dict((files or {}).get(name, {})))
                 for name, rows in counts.items()}

        def replace(entries: dict[str, CollectionEntry]) -> None:
            entries.clear()
            entries.update(fresh)

        self._change(replace)

    def _change(self, change: Callable[[dict[str, CollectionEntry]], object]) -> None:
        with self._lock, _flocked(self._file_lock):
            entries = dict(read_record(self.path).collections)
            before = dict(entries)
            change(entries)
            if entries != before or not self.path.exists():
                _write(self.path, entries)
            self._entries = entries


@contextmanager
def _flocked(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_record(path: Path) -> RecordSnapshot:
    if not path.exists():
        return RecordSnapshot()
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        collections = {name: CollectionEntry(int(e["rows"]), int(e["min_rows"]), float(e.get("updated_at", 0)),
                                             {str(k): str(v) for k, v in e.get("files", {}).items()})
                       for name, e in payload["collections"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RecordError(f"the gateway's record {str(path)!r} is unreadable ({type(exc).__name__}: {exc})") from exc
    return RecordSnapshot(collections, exists=True)


def _write(path: Path, entries: Mapping[str, CollectionEntry]) -> None:
    payload = {"format": FORMAT, "collections": {
        name: {"rows": e.rows, "min_rows": e.min_rows, "updated_at": round(e.updated_at, 3), "files": dict(e.files)}
        for name, e in sorted(entries.items())}}
    write_atomically(path, json.dumps(payload, indent=1, sort_keys=True).encode("utf-8"))


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Temp file, fsync, rename, directory fsync: readers see the old or the new file, never half.

    The temp file is created with `mode` (the umask can only narrow it) before anything is written,
    so a secret is never readable by others, not even for a moment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.unlink(missing_ok=True)  # a leftover may have looser permissions: O_CREAT keeps those
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class WriteGate:
    """A cross-process gate: writers hold it shared per write call, a backup holds it exclusive.

    `flock` on `x.writes.lock`; the lock goes with the process, so a crash never leaves it held.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._held(exclusive=False):
            yield

    @contextmanager
    def paused(self, timeout_s: float = 60.0) -> Iterator[None]:
        """Wait for in-flight write calls to finish and keep new ones waiting until the block ends."""
        with self._held(exclusive=True, timeout_s=timeout_s):
            yield

    @contextmanager
    def _held(self, *, exclusive: bool, timeout_s: float | None = None) -> Iterator[None]:
        import fcntl

        try:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            # No gate file (read-only or vanished directory): the write itself reports the fault.
            yield
            return
        try:
            mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
            if timeout_s is None:
                fcntl.flock(fd, mode)
            else:
                deadline = time.monotonic() + timeout_s
                while True:
                    try:
                        fcntl.flock(fd, mode | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"writes did not pause within {timeout_s:.0f} s "
                                               f"({str(self.path)!r} stayed locked)") from None
                        time.sleep(0.05)
            yield
        finally:
            os.close(fd)
