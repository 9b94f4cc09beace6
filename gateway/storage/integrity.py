"""Checks of a milvus-lite directory made before milvus-lite opens it, because opening damage destroys data.

milvus-lite 3.2.2 keeps, per collection, `collections/<name>/manifest.json` (and the previous
version as `manifest.json.prev`) naming the Parquet data and delta files under
`partitions/<partition>/`. When `manifest.json` is empty, garbage or missing, its start-up
recovery falls back to `.prev` (or to an empty manifest) and then *deletes* every data and index
file the lost manifest named, as "orphans" (milvus_lite/engine/recovery.py). So the gateway
checks first and refuses, naming the file and the way back, instead of letting that happen.

What is checked: each collection's `schema.json` and `manifest.json` parse; every data and
delta file a manifest names exists, has Parquet's `PAR1` magic at both ends and a readable
footer, and has the sha256 the gateway's record noted when the file was committed (a file with
no recorded sha256 is decoded in full instead); each index file built from a named data file has
the size its header says; each collection in the record is still on disk. Row counts need the
engine and are checked right after opening (gateway/runtime.py); content hashes and vectors by
`gateway verify`.
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

import numpy as np

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


def record_hint(paths: StorePaths) -> str:
    """The ways out of an unreadable record, the one that keeps the data first."""
    return (f"the store itself may be intact: move the record aside (`mv {paths.record} {paths.record}.unreadable`) "
            f"and run `gateway verify`, which checks every row of {paths.store} and, when it finds no damage, "
            "records the store as it is (nothing is lost); otherwise " + restore_hint(paths))


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
        recorded = entry.files if entry is not None else {}
        if not found:
            found = _check_hashes(directory, recorded) + _check_decodes(directory, recorded)
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


def _check_decodes(directory: Path, recorded: Mapping[str, str]) -> list[Problem]:
    """Files the record has no sha256 for (a store without a record, one from before hashes were
    recorded) are decoded in full instead: a corrupt page fails every open of the store otherwise."""
    import pyarrow
    import pyarrow.parquet as pq

    problems = []
    for rel in manifest_files(directory):
        if rel in recorded or not (directory / rel).is_file():
            continue
        try:
            pq.read_table(directory / rel)
        except (pyarrow.ArrowException, OSError) as exc:
            problems.append(Problem(directory / rel, f"cannot be decoded ({_one_line(exc)}), and the gateway's "
                                                     "record holds no sha256 for it"))
    return problems


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


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
        named = [directory / "partitions" / partition / rel
                 for key in ("data_files", "delta_files") for rel in contents.get(key, [])]
        for path in named:
            problems.extend(_check_parquet(path, manifest))
        problems.extend(_check_indexes(directory / "partitions" / partition / "indexes", named))
    return problems


def _check_indexes(indexes: Path, named: list[Path]) -> list[Problem]:
    """Index sidecars of the data files the manifest names (`<data stem>.<field>.<type>.idx|.sidx`):
    milvus-lite loads them as they are, and a truncated one fails every load of the collection."""
    if not indexes.is_dir():
        return []
    stems = {path.stem: path for path in named}
    problems = []
    for index in sorted(indexes.iterdir()):
        data = stems.get(index.name.split(".", 1)[0])
        if data is None or index.suffix not in (".idx", ".sidx"):
            continue  # an orphan sidecar: milvus-lite never loads it and removes it at the next flush
        reason = _index_problem(index)
        if reason is not None:
            problems.append(Problem(index, (
                f"is damaged ({reason}): it is the index milvus-lite built from {data.name}, and loading the "
                f"collection fails on it; an index is derived data: delete this file and milvus-lite rebuilds "
                f"it from {data.name} at the next load")))
    return problems


def _index_problem(path: Path) -> str | None:
    """Why an index sidecar cannot be loaded, or None. FLAT indexes are NumPy .npy files (milvus-lite's
    BruteForceIndex.save): their header gives the exact size; other kinds are only checked non-empty."""
    size = path.stat().st_size
    if size == 0:
        return "empty file"
    if not path.name.lower().endswith((".flat.idx", ".brute_force.idx")):
        return None
    from numpy.lib import format as npy

    try:
        with open(path, "rb") as handle:
            version = npy.read_magic(handle)
            read_header = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
            if read_header is None:
                return None  # a newer .npy format: not checked here
            shape, _, dtype = read_header(handle)
            expected = handle.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    except (ValueError, OSError, EOFError) as exc:
        return f"{size} bytes, its NumPy header is unreadable: {exc}"
    if size != expected:
        return f"{size} bytes, but its NumPy header describes {expected} bytes (truncated)" if size < expected \
            else f"{size} bytes, but its NumPy header describes {expected} bytes"
    return None


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
    # The footer (schema, row groups, offsets) is what milvus-lite reads first; damaged, it fails every
    # call on the collection. milvus-lite depends on pyarrow for its Parquet files.
    import pyarrow
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except (pyarrow.ArrowException, OSError) as exc:
        return [Problem(path, f"has a damaged Parquet footer ({_one_line(exc)})")]
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


def process_started_at(pid: int) -> float | None:
    """When a process started, in seconds since the epoch (Linux /proc), or None when unknown.

    /proc/<pid>/stat field 22 is the start time in clock ticks after boot; /proc/stat's btime is the
    boot time. Precise to about a second (btime is whole seconds)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # fields after the command name start at field 3
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


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
