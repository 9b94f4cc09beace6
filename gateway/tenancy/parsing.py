"""Parse tenant files' YAML, many at once across processes.

Parsing is most of reading a tenant file (PyYAML builds every value in Python even with libyaml's
scanner: about 0.12 ms a file, 2.4 s for 20,000). A start with many files not seen before splits
them between this process and `cpus - 1` child processes (`python -m gateway.tenancy.parsing`),
which import nothing but PyYAML and send back what each file held: a start-up's cost no longer
grows with one core's speed. Validation stays in the serving process (its models are what the
registry keeps); children only parse, so a file validates the same however it was parsed.

A child that fails (killed, no interpreter) costs nothing but time: its files are parsed here.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from gateway.children import environment, python_module

# libyaml's loader when PyYAML was built with it (the pure-Python one is several times slower).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Below this many files a child's start (about 60 ms) costs more than it saves.
PARALLEL_MIN_FILES = 1000
MAX_PARSERS = 8


@dataclass(frozen=True, slots=True)
class Parsed:
    stamp: tuple[int, int] | None  # (mtime_ns, size) of the file as read; None when it could not be
    raw: object = None
    error: str | None = None       # the YAML error, or why the file could not be read
    unreadable: bool = False


def parse_file(path: Path | str) -> Parsed:
    try:
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            data = handle.read()
    except OSError as exc:
        return Parsed(None, error=str(exc.strerror or exc), unreadable=True)
    stamp = (status.st_mtime_ns, status.st_size)
    try:
        return Parsed(stamp, raw=yaml.load(data.decode("utf-8"), Loader=_LOADER))
    except UnicodeDecodeError as exc:
        return Parsed(stamp, error=f"not UTF-8 text: {exc}", unreadable=True)
    except yaml.YAMLError as exc:
        return Parsed(stamp, error=str(exc))


def parse_many(paths: list[Path], *, parsers: int | None = None) -> dict[str, Parsed]:
    """Every file of `paths` parsed, by str(path); the work split between this process and children."""
    count = parsers if parsers is not None else min(MAX_PARSERS, _cpus())
    if count < 2 or len(paths) < 2:
        return {str(path): parse_file(path) for path in paths}
    shares = [paths[i::count] for i in range(count)]
    results: dict[str, Parsed] = {}
    children = [threading.Thread(target=_in_child, args=(share, results), daemon=True) for share in shares[1:]]
    for child in children:
        child.start()
    for path in shares[0]:
        results[str(path)] = parse_file(path)
    for child in children:
        child.join()
    return results


def _in_child(paths: list[Path], results: dict[str, Parsed]) -> None:
    names = [str(path) for path in paths]
    try:
        process = subprocess.run(python_module("gateway.tenancy.parsing"), input="\n".join(names).encode(),
                                 capture_output=True, timeout=600, check=True, env=environment())
        answers = pickle.loads(process.stdout)  # noqa: S301 - our own child, over a pipe
        if len(answers) != len(names):
            raise ValueError(f"{len(answers)} answers for {len(names)} files")
        parsed = [Parsed(*answer) for answer in answers]
    except Exception:  # noqa: BLE001 - whatever went wrong in the child, parsing here gives the answer
        parsed = [parse_file(name) for name in names]
    results.update(zip(names, parsed))  # one update per child: a dict update holds the GIL throughout


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _main() -> None:
    names = sys.stdin.buffer.read().decode("utf-8").split("\n")
    answers = [(p.stamp, p.raw, p.error, p.unreadable) for p in map(parse_file, filter(None, names))]
    sys.stdout.buffer.write(pickle.dumps(answers, protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    _main()
