"""Checks of a milvus-lite directory made before milvus-lite opens it, because opening damage destroys data.

milvus-lite 3.2.2 keeps, per collection, `collections/<name>/manifest.json` (and the previous
version as `manifest.json.prev`) naming the Parquet data and delta files under
`partitions/<partition>/`. When `manifest.json` is empty, garbage or missing, its start-up
recovery falls back to `.prev` (or to an empty manifest) and then *deletes* every data and index
file the lost manifest named, as "orphans" (milvus_lite/engine/recovery.py). So the gateway
checks first and refuses, naming the file and the way back, instead of letting that happen.

What is checked: each collection's `schema.json` and `manifest.json` parse; every data and
delta file a manifest names exists and has Parquet's `PAR1` magic at both ends, and has the
sha256 the gateway's record noted when the file was committed; each collection in the record
is still on disk. Row counts need the engine and are checked right
after opening (gateway/runtime.py); content hashes and vectors by `gateway verify`.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.storage.record import RecordSnapshot, StorePaths

_PARQUET_MAGIC = b"PAR1"
_PROBE = ".gateway-write-probe"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the store, named by the file it is about."""

    path: Path
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


def restore_hint(paths: StorePaths) -> str:
    return (f"restore the last backup with `gateway restore BACKUP_DIR` (it replaces {paths.store} and keeps "
            f"the damaged copy beside it), or move {paths.store} aside and start with `--accept-empty` to "
            "begin again from an empty store")


def refusal(paths: StorePaths, problems: list[Problem], note: str = "") -> str:
    """The sentence that refuses to open a damaged store: the first problems and the way back."""
    shown = "; ".join(str(p) for p in problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    hint = restore_hint(paths)
    return f"refusing to open the store {str(paths.store)!r}: {shown}{more}. {note}{hint[0].upper()}{hint[1:]}"


def collection_dirs(store: Path) -> dict[str, Path]:
    """Physical collection name -> its directory, in the default database (the one the gateway uses)."""
    root = store / "collections"
    if not root.is_dir():
        return {}
    return {entry.name: entry for entry in sorted(root.iterdir()) if entry.is_dir()}


def check_files(paths: StorePaths, record: RecordSnapshot, *, accept_empty: bool = False) -> list[Problem]:
    """Everything that can be checked without opening the store; an empty list means safe to open."""
    problems: list[Problem] = []
    on_disk = collection_dirs(paths.store)
    for name, directory in on_disk.items():
        found = _check_collection(directory)
        entry = record.collections.get(name)
        if not found and entry is not None:
            found = _check_hashes(directory, entry.files)
        problems.extend(found)
    if not accept_empty:
        missing = [name for name in record.collections if name not in on_disk]
        if missing and not paths.store.exists():
            problems.append(Problem(paths.store, (
                f"the store directory is missing, but the gateway's record {paths.record} lists "
                f"{len(record.collections)} collection(s) with {record.total_rows} row(s)")))
        else:
            for name in missing:
                rows = record.collections[name].rows
                problems.append(Problem(paths.store / "collections" / name, (
                    f"collection directory is missing, but the gateway's record {paths.record} says it held "
                    f"{rows} row(s)")))
    return problems


def _check_hashes(directory: Path, recorded: Mapping[str, str]) -> list[Problem]:
    """Files the record hashed and the manifest still names must be byte for byte the same."""
    return [Problem(directory / rel, "differs from the sha256 the gateway recorded when it was written "
                                     "(bytes changed on disk)")
            for rel in manifest_files(directory)
            if rel in recorded and (directory / rel).is_file() and sha256_file(directory / rel) != recorded[rel]]


def _check_collection(directory: Path) -> list[Problem]:
    schema = directory / "schema.json"
    manifest = directory / "manifest.json"
    problems = []
    if not schema.exists():
        problems.append(Problem(schema, "is missing (the collection's schema)"))
    elif (reason := _json_problem(schema)) is not None:
        problems.append(Problem(schema, reason))
    if not manifest.exists():
        previous = directory / "manifest.json.prev"
        fallback = ("milvus-lite would fall back to manifest.json.prev and delete every newer data file"
                    if previous.exists() else "milvus-lite would start this collection empty and delete its data files")
        problems.append(Problem(manifest, f"is missing; {fallback}"))
        return problems
    reason = _json_problem(manifest)
    if reason is not None:
        problems.append(Problem(manifest, f"{reason}; milvus-lite would fall back to manifest.json.prev "
                                          "and delete every data file the newer manifest named"))
        return problems
    payload = json.loads(manifest.read_text(encoding="utf-8"))
    partitions = payload.get("partitions")
    if not isinstance(partitions, dict):
        return [*problems, Problem(manifest, "has no 'partitions' object")]
    for partition, contents in partitions.items():
        if not isinstance(contents, dict):
            problems.append(Problem(manifest, f"partition {partition!r} is not an object"))
            continue
        for key in ("data_files", "delta_files"):
            for rel in contents.get(key, []):
                problems.extend(_check_parquet(directory / "partitions" / partition / rel, manifest))
    return problems


def manifest_files(directory: Path) -> list[str]:
    """Data and delta files the collection's manifest.json names, relative to its directory."""
    try:
        payload = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
        return [f"partitions/{partition}/{rel}" for partition, contents in payload["partitions"].items()
                for key in ("data_files", "delta_files") for rel in contents.get(key, [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def file_hashes(directory: Path, known: Mapping[str, str]) -> dict[str, str]:
    """sha256 of every file the manifest names; files hashed before are not read again (immutable)."""
    hashes = {}
    for rel in manifest_files(directory):
        if rel in known:
            hashes[rel] = known[rel]
        elif (directory / rel).is_file():
            hashes[rel] = sha256_file(directory / rel)
    return hashes


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _json_problem(path: Path) -> str | None:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    except ValueError as exc:
        size = path.stat().st_size
        return f"is not valid JSON ({'empty file' if size == 0 else exc})"
    if not isinstance(payload, dict):
        return f"is not a JSON object (found {type(payload).__name__})"
    return None


def _check_parquet(path: Path, manifest: Path) -> list[Problem]:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return [Problem(path, f"is named by {manifest.name} but missing")]
    if size < 2 * len(_PARQUET_MAGIC):
        return [Problem(path, f"is {size} bytes, too short for a Parquet file")]
    with open(path, "rb") as handle:
        head = handle.read(4)
        handle.seek(-4, os.SEEK_END)
        tail = handle.read(4)
    if head != _PARQUET_MAGIC or tail != _PARQUET_MAGIC:
        return [Problem(path, "is not a complete Parquet file (PAR1 magic missing at the start or end)")]
    return []


# -- what stops a directory from being opened at all ---------------------------------------


def lock_holder(store: Path) -> int | None:
    """The PID holding milvus-lite's LOCK on `store`, 0 if held by an unknown process, None if free."""
    lock = store / "LOCK"
    if not lock.exists():
        return None
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            # flock locks belong to the open file, so this probe conflicts with any holder, even us.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_from_proc_locks(lock) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _pid_from_proc_locks(lock: Path) -> int | None:
    """Linux lists every flock in /proc/locks as `n: FLOCK ADVISORY WRITE pid maj:min:inode ...`."""
    try:
        inode = lock.stat().st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter, not the holder
            continue
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def describe_pid(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\x00", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    command = " ".join(command.split())
    return f"PID {pid}" + (f" ({command[:120]})" if command else "")


def write_problem(directory: Path) -> str | None:
    """Why a file cannot be written in `directory` right now (read-only, full, gone), or None.

    Creates, writes, fsyncs and removes a small file: the same path a commit takes.
    """
    probe = directory / _PROBE
    try:
        with open(probe, "wb") as handle:
            handle.write(b"\0" * 4096)
            handle.flush()
            os.fsync(handle.fileno())
        probe.unlink()
    except OSError as exc:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
        return describe_os_error(exc, directory)
    return None


def describe_os_error(exc: OSError, path: Path) -> str:
    return f"{path} {os_error_reason(exc)}"


def os_error_reason(exc: OSError) -> str:
    """What an OSError means for a write, without the path (the rest of a sentence about a file)."""
    reasons = {
        errno.EROFS: "is on a read-only file system",
        errno.ENOSPC: "has no space left on its device",
        errno.EDQUOT: "is over its disk quota",
        errno.EACCES: "is not writable by this user (permission denied)",
        errno.EPERM: "is not writable by this user (operation not permitted)",
        errno.ENOENT: "does not exist (was the directory removed?)",
    }
    return reasons.get(exc.errno or 0, f"cannot be written ({exc.strerror or type(exc).__name__})")


def open_refusal(paths: StorePaths) -> str | None:
    """Why milvus-lite cannot open `paths.store` at all (lock held, read-only, not writable), or None."""
    store = paths.store
    holder = lock_holder(store) if store.is_dir() else None
    # This process holding it is fine: pymilvus reuses the embedded server it already started.
    if holder is not None and holder != os.getpid():
        who = describe_pid(holder) if holder else "another process"
        return (f"cannot open milvus-lite directory {str(store)!r}: {who} holds its lock; milvus-lite allows "
                "one process per directory: stop that process (a running `gateway serve`?), use another GATEWAY_MILVUS_URI, "
                "or point every process at a Milvus server")
    target = store if store.is_dir() else store.parent
    problem = write_problem(target)
    if problem is not None and ("read-only" in problem or "not writable" in problem):
        return (f"cannot open milvus-lite directory {str(store)!r}: {problem}; milvus-lite writes its LOCK, "
                "write-ahead log and manifests even to serve reads, so mount it read-write (or copy it to a "
                "writable disk) and start again")
    return None
