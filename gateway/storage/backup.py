"""`gateway backup DEST` / `gateway restore SRC` for a milvus-lite store, its record and token vectors.

A backup may run while `gateway serve` holds the store. It closes the write gate
(`x.writes.lock`, see record.py) for the copy, so writes wait (reads go on) and the copy is one
point in time across chunks, parents, token vectors and the record; the pause lasts as long as
the copy (about 1 s per 100 MB on a local disk). Per collection it copies the files
`manifest.json` names, and copies again if milvus-lite's background compaction swapped the
manifest meanwhile. Every file's size and sha256 go into `DEST/backup.json`, and the copy is
checked like a store before it is opened (integrity.py) before the backup is declared done.

Writes may come from several processes (serve's workers, `gateway ingest` through the
milvus-lite server serve runs): each holds the gate shared per write, so the pause covers them all.

Restore needs the gateway stopped (milvus-lite allows one process per store). It re-hashes
every file, checks the copy, opens it in a staging directory and compares each collection's
row count with the backed-up record, and only then moves the current store aside (kept as
`x.db.before-restore-<time>`) and the restored one into place.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import StorageUnavailable
from gateway.storage.integrity import check_files, collection_dirs, describe_pid, lock_holder, sha256_file
from gateway.storage.record import RecordSnapshot, StorePaths, WriteGate, read_record, write_atomically

FORMAT = 1
MANIFEST = "backup.json"
# Named like a live store's files (record.py), so a copy of a backup is itself a store to verify.
_STORE, _RECORD, _TOKENS = "store.db", "store.record.json", "store.tokens"
# Times a collection is copied again when compaction changed its manifest during the copy.
_ATTEMPTS = 5
_TOP_LEVEL = ("aliases.json", "database_properties.json")


class BackupError(StorageUnavailable):
    """A backup could not be taken, or a backup is damaged and was not restored."""


@dataclass(frozen=True, slots=True)
class BackupSummary:
    path: Path
    files: int
    bytes: int
    collections: int
    rows: int
    pause_seconds: float

    def summary(self) -> dict[str, object]:
        return {"path": str(self.path), "files": self.files, "bytes": self.bytes, "collections": self.collections,
                "rows": self.rows, "write_pause_s": round(self.pause_seconds, 3)}


def backup(paths: StorePaths, tokens_dir: Path, dest: Path, *, pause_timeout_s: float = 60.0) -> BackupSummary:
    if dest.exists() and any(dest.iterdir()):
        raise BackupError(f"backup destination {str(dest)!r} exists and is not empty; name a new directory")
    if not paths.store.is_dir():
        raise BackupError(f"there is no milvus-lite store at {str(paths.store)!r} to back up")
    staging = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        started = time.monotonic()
        try:
            with WriteGate(paths.write_lock).paused(pause_timeout_s):
                _copy_store(paths.store, staging / _STORE)
                if paths.record.exists():
                    shutil.copy2(paths.record, staging / _RECORD)
                _copy_tokens(tokens_dir, staging / _TOKENS)
        except TimeoutError as exc:
            raise BackupError(f"{exc}; a long ingest holds writes: try again, or pass a longer "
                              "--pause-timeout") from exc
        except OSError as exc:
            raise BackupError(f"copying to {staging} failed: {exc}; no backup was written") from exc
        paused = time.monotonic() - started
        record = read_record(staging / _RECORD)
        problems = check_files(StorePaths(staging / _STORE), record)
        if problems:
            raise BackupError(f"the copy failed its check, so no backup was written: {problems[0]}")
        files = _hash_tree(staging)
        write_atomically(staging / MANIFEST, json.dumps({
            "format": FORMAT, "created_at": time.time(), "source": str(paths.store), "files": files,
        }, indent=1, sort_keys=True).encode("utf-8"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest.rmdir()
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BackupSummary(dest, len(files), sum(f["size"] for f in files.values()), len(record.collections),
                         record.total_rows, paused)


def _copy_store(store: Path, target: Path) -> None:
    target.mkdir(parents=True)
    for name in _TOP_LEVEL:
        if (store / name).exists():
            shutil.copy2(store / name, target / name)
    (target / "collections").mkdir()
    for name, directory in collection_dirs(store).items():
        _copy_collection(directory, target / "collections" / name)


def _copy_collection(source: Path, target: Path) -> None:
    """The files one manifest names, copied again if the manifest changed (background compaction)."""
    for _ in range(_ATTEMPTS):
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        manifest = (source / "manifest.json").read_bytes()
        try:
            payload = json.loads(manifest)
            for name in ("schema.json", "manifest.json.prev"):
                if (source / name).exists():
                    shutil.copy2(source / name, target / name)
            for partition, contents in payload.get("partitions", {}).items():
                for rel in [*contents.get("data_files", []), *contents.get("delta_files", [])]:
                    _copy_file(source / "partitions" / partition / rel, target / "partitions" / partition / rel)
                # Index sidecars are rebuilt on load when missing, so one compaction removes is no loss.
                for sidecar in sorted((source / "partitions" / partition / "indexes").glob("*")):
                    try:
                        _copy_file(sidecar, target / "partitions" / partition / "indexes" / sidecar.name)
                    except FileNotFoundError:
                        pass
            if (source / "wal").is_dir():
                shutil.copytree(source / "wal", target / "wal")
        except FileNotFoundError:
            continue  # compaction removed a file between reading the manifest and copying it
        (target / "manifest.json").write_bytes(manifest)
        if (source / "manifest.json").read_bytes() == manifest:
            return
    raise BackupError(f"{source} kept changing during {_ATTEMPTS} copies (milvus-lite compaction); try again")


def _copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def _copy_tokens(source: Path, target: Path) -> None:
    """SQLite's online backup: a consistent copy even of a database in WAL mode.

    Only a store that still has a legacy token-vector directory gets one in its backup (today's
    token vectors live in the store itself), so a restore does not create an empty one."""
    databases = sorted(source.glob("*.sqlite")) if source.is_dir() else []
    if databases:
        target.mkdir(parents=True)
    for path in databases:
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        dst = sqlite3.connect(target / path.name)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()


def _hash_tree(root: Path) -> dict[str, dict[str, object]]:
    return {str(path.relative_to(root)): {"size": path.stat().st_size, "sha256": sha256_file(path)}
            for path in sorted(_files(root))}


def _files(root: Path) -> Iterator[Path]:
    return (p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


# -- restore ---------------------------------------------------------------------------------


def check_backup(src: Path) -> RecordSnapshot:
    """Every file of the backup as it was written, and the store in it safe to open; its record."""
    manifest = src / MANIFEST
    try:
        payload = json.loads(manifest.read_text(encoding="utf-8"))
        files = payload["files"]
    except (OSError, ValueError, KeyError) as exc:
        raise BackupError(f"{manifest} is missing or unreadable ({exc}); {src} is not a complete backup") from exc
    for rel, expected in files.items():
        path = src / rel
        if not path.is_file():
            raise BackupError(f"backup file {path} is missing; this backup cannot be restored")
        if path.stat().st_size != expected["size"] or sha256_file(path) != expected["sha256"]:
            raise BackupError(f"backup file {path} differs from the sha256 recorded in {manifest}; "
                              "this backup is damaged and cannot be restored")
    extra = sorted(str(p.relative_to(src)) for p in _files(src) if str(p.relative_to(src)) not in files)
    if extra:
        raise BackupError(f"backup {src} holds files its {MANIFEST} does not list (e.g. {extra[0]}); "
                          "it was changed after it was taken")
    record = read_record(src / _RECORD)
    problems = check_files(StorePaths(src / _STORE), record)
    if problems:
        raise BackupError(f"the store in backup {src} failed its check: {problems[0]}")
    return record


def restore(src: Path, paths: StorePaths, tokens_dir: Path) -> dict[str, object]:
    """Check `src`, open a staged copy and compare row counts, then swap it in; returns what was done."""
    from gateway.storage.server import live_server

    served = live_server(paths)
    if served is not None:
        raise BackupError(f"`gateway serve` (pid {served.supervisor_pid}) serves {paths.store} through the "
                          f"milvus-lite server at {served.uri}; stop the gateway before restoring")
    holder = lock_holder(paths.store) if paths.store.is_dir() else None
    if holder is not None:
        raise BackupError(f"{describe_pid(holder) if holder else 'another process'} holds {paths.store}; "
                          "stop the gateway before restoring (milvus-lite allows one process per store)")
    record = check_backup(src)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    # pymilvus opens a local store only by a name ending in .db.
    staged = paths.store.with_name(f"{paths.store.stem}.restoring-{stamp}.db")
    shutil.copytree(src / _STORE, staged)
    try:
        counts = _staged_counts(staged)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    wrong = [f"{name}: {counts.get(name, 0)} rows, backup record {entry.rows}"
             for name, entry in record.collections.items() if not entry.accepts(counts.get(name, 0))]
    if wrong:
        shutil.rmtree(staged, ignore_errors=True)
        raise BackupError(f"the restored copy does not hold what the backup recorded ({'; '.join(wrong[:5])}); "
                          "nothing was changed")
    kept = []
    for current in (paths.store, paths.record, tokens_dir):
        if current.exists():
            aside = current.with_name(f"{current.name}.before-restore-{stamp}")
            current.rename(aside)
            kept.append(str(aside))
    staged.rename(paths.store)
    if (src / _RECORD).exists():
        shutil.copy2(src / _RECORD, paths.record)
    if any((src / _TOKENS).glob("*.sqlite")):  # an older backup may hold an empty one: no legacy tokens
        shutil.copytree(src / _TOKENS, tokens_dir)
    return {"restored": str(paths.store), "from": str(src), "collections": len(counts),
            "rows": sum(counts.values()), "kept_aside": kept}


def _staged_counts(staged: Path) -> dict[str, int]:
    """Row counts of a staged store, opened in this process and released again."""
    from pymilvus import MilvusClient, MilvusException

    from milvus_lite.server_manager import server_manager_instance

    try:
        client = MilvusClient(uri=str(staged))
    except MilvusException as exc:
        raise BackupError(f"the restored copy {staged} does not open: {exc.message}; nothing was changed") from exc
    try:
        counts = {}
        for name in client.list_collections():
            client.load_collection(name)
            rows = client.query(name, filter="", output_fields=["count(*)"])
            counts[name] = int(rows[0]["count(*)"]) if rows else 0
        return counts
    except MilvusException as exc:
        raise BackupError(f"the restored copy {staged} cannot be read: {exc.message}; nothing was changed") from exc
    finally:
        client.close()
        # pymilvus keeps the embedded server (and milvus-lite's LOCK) until exit unless released.
        server_manager_instance.release_server(str(staged))
