"""Mutation score of the boundary modules: fails when a module's tests stop noticing broken code.

Runs mutmut 3 as configured in pyproject.toml ([tool.mutmut]: which modules, which fast unit
tests), then the hand-made mutants of module-level constants that mutmut does not mutate, and
prints killed / total / score per module. Mutants listed in EQUIVALENT (each with the changed
line and a reason) are left out of the score; an entry whose line no longer matches, or whose
mutant is now killed, is stale and fails the run, so the list cannot rot silently.

    python benchmarks/mutation.py                  # fresh run, 90% threshold, 2 workers
    python benchmarks/mutation.py --threshold 95 --jobs 4

Exit status: 0 when every module scores at least the threshold and every constant mutant is
caught; 1 otherwise. See docs/testing.md.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import types
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"

# mutmut's exit codes (mutmut/stats.py). A timeout means the mutant made a test hang: caught.
KILLED = {1, 3, 24, -24, 36, 37, 152, 255}
# A constant mutant's tests run in about a second; one that runs this long has made them hang.
CONSTANT_TIMEOUT_S = 120
STATUS = {0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 35: "suspicious", -11: "segfault",
          -9: "segfault", None: "not checked"}


@dataclass(frozen=True)
class Equivalent:
    """A mutant no test can kill because the program means the same: the `+` line and why."""

    line: str
    reason: str


EQUIVALENT: dict[str, Equivalent] = {
    "gateway.storage.filters.x_literal__mutmut_23": Equivalent(
        "return json.dumps(value, ensure_ascii=None)",
        "json.dumps tests ensure_ascii for truth; None and False both keep non-ASCII verbatim"),
    "gateway.tenancy.auth.x_key_digest__mutmut_4": Equivalent(
        'return hashlib.sha256(key.encode("UTF-8")).hexdigest()',
        "codec names are case-insensitive: 'UTF-8' is the same codec as 'utf-8'"),
}


@dataclass(frozen=True)
class ConstantMutant:
    """A hand-made change to a module-level constant (mutmut leaves those alone)."""

    path: str
    old: str
    new: str


F, A, R = "gateway/storage/filters.py", "gateway/tenancy/auth.py", "gateway/retrieval/fusion.py"
CONSTANT_MUTANTS = [
    ConstantMutant(F, '{"created_at", "updated_at"})', '{"created_at", "updated_at", "namespace"})'),
    ConstantMutant(F, '{"created_at", "updated_at"})', '{"created_at", "updated_at", "tenant"})'),
    ConstantMutant(F, '{"source_id", "chunk_id", "title",', '{"source_id", "chunk_id",'),
    ConstantMutant(F, '{"created_at", "updated_at"})', '{"created_at"})'),
    ConstantMutant(F, '"source_path", "content_hash"})', '"source_path"})'),
    ConstantMutant(F, 'METADATA_PREFIX = "metadata."', 'METADATA_PREFIX = "metadata"'),
    ConstantMutant(F, "MAX_NODES = 64", "MAX_NODES = 65"),
    ConstantMutant(F, "MAX_NODES = 64", "MAX_NODES = 63"),
    ConstantMutant(F, "MAX_DEPTH = 8", "MAX_DEPTH = 9"),
    ConstantMutant(F, "MAX_VALUES = 1024", "MAX_VALUES = 1025"),
    ConstantMutant(F, "INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1", "INT64_MIN, INT64_MAX = -(2**63), 2**63"),
    ConstantMutant(F, "INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1", "INT64_MIN, INT64_MAX = 1 - (2**63), 2**63 - 1"),
    ConstantMutant(F, "_SHOWN_CHARS = 60", "_SHOWN_CHARS = 61"),
    ConstantMutant(F, "_REPR.maxlevel = 3", "_REPR.maxlevel = 4"),
    ConstantMutant(F, 'r"[A-Za-z_][A-Za-z0-9_]{0,63}"', 'r"[A-Za-z_][A-Za-z0-9_]{0,64}"'),
    ConstantMutant(F, 'r"[A-Za-z_][A-Za-z0-9_]{0,63}"', 'r"[A-Za-z0-9_][A-Za-z0-9_]{0,63}"'),
    ConstantMutant(F, 'r"[A-Za-z_][A-Za-z0-9_]{0,63}"', 'r"[A-Za-z_][A-Za-z0-9_-]{0,63}"'),
    ConstantMutant(F, r"[\x00-\x08\x0b\x0c\x0e-\x1f", r"[\x00-\x08\x0e-\x1f"),
    ConstantMutant(F, r"[\x00-\x08\x0b\x0c\x0e-\x1f", r"[\x00-\x08\x0b\x0c\x0e-\x1e"),
    ConstantMutant(F, r"[\x00-\x08\x0b\x0c\x0e-\x1f", r"[\x00-\x09\x0b\x0c\x0e-\x1f"),
    ConstantMutant(F, r"\x0e-\x1f\x7f\ud800-\udfff]", r"\x0e-\x1f\ud800-\udfff]"),
    ConstantMutant(F, r"\x0e-\x1f\x7f\ud800-\udfff]", r"\x0e-\x1f\x7f]"),
    ConstantMutant(F, r"\x0e-\x1f\x7f\ud800-\udfff]", r"\x0e-\x1f\x7f\ud800-\udbff]"),
    ConstantMutant(F, 'Op.NE: "!="', 'Op.NE: "=="'),
    ConstantMutant(F, 'Op.GT: ">"', 'Op.GT: ">="'),
    ConstantMutant(F, 'Op.LTE: "<="', 'Op.LTE: "<"'),
    ConstantMutant(F, 'Op.NIN: "not in"', 'Op.NIN: "in"'),
    ConstantMutant(F, 'GTE = "gte"', 'GTE = "ge"'),
    ConstantMutant(F, 'IS_NULL = "is_null"', 'IS_NULL = "isnull"'),
    ConstantMutant(F, r'_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")', r'_DATE = re.compile(r"\d{4}-\d{2}-\d{2}.*")'),
    ConstantMutant(F, "_EPOCH = datetime(1970, 1, 1,", "_EPOCH = datetime(1970, 1, 2,"),
    ConstantMutant(F, r'_LIKE_SPECIAL = re.compile(r"([\\%_])")', r'_LIKE_SPECIAL = re.compile(r"([%_])")'),
    ConstantMutant(F, r'_LIKE_SPECIAL = re.compile(r"([\\%_])")', r'_LIKE_SPECIAL = re.compile(r"([\\%])")'),
    ConstantMutant(F, 'Op.CONTAINS: "%{}%"', 'Op.CONTAINS: "{}%"'),
    ConstantMutant(F, 'Op.CONTAINS_ANY: "json_contains_any"', 'Op.CONTAINS_ANY: "json_contains_all"'),
    ConstantMutant(F, "Op.LT, Op.LTE, Op.IN, Op.NIN})", "Op.LT, Op.LTE, Op.IN})"),
    ConstantMutant(F, "_ORDERED_OPS | {Op.CONTAINS, Op.PREFIX}", "_ORDERED_OPS | {Op.CONTAINS, Op.PREFIX, Op.EXISTS}"),
    ConstantMutant(F, "_ORDERED_OPS | {Op.CONTAINS, Op.PREFIX}", "_ORDERED_OPS | {Op.CONTAINS}"),
    ConstantMutant(F, "TIME_OPS: frozenset[Op] = _ORDERED_OPS", "TIME_OPS: frozenset[Op] = TEXT_OPS"),
    ConstantMutant(A, "Role.WRITER: 1", "Role.WRITER: 2"),
    ConstantMutant(A, "Role.READER: 0", "Role.READER: 1"),
    ConstantMutant(A, "Role.ADMIN: 2", "Role.ADMIN: 1"),
    ConstantMutant(R, "RRF_K = 60", "RRF_K = 61"),
]


@dataclass
class Score:
    module: str
    total: int = 0
    excluded: int = 0
    killed: int = 0
    constants: int = 0
    constants_caught: int = 0

    @property
    def percent(self) -> float:
        counted = self.total - self.excluded
        return 100.0 * self.killed / counted if counted else 100.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=90.0, help="minimum score per module, percent")
    parser.add_argument("--jobs", type=int, default=2, help="parallel test processes")
    args = parser.parse_args()

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    modules: list[str] = config["only_mutate"]
    tests: list[str] = config["pytest_add_cli_args_test_selection"]
    started = time.monotonic()
    # Always fresh: cached results from before a code or test change would be wrong.
    shutil.rmtree(MUTANTS, ignore_errors=True)
    with tempfile.TemporaryFile("w+") as log:
        run = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(args.jobs)],
                             cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        if run.returncode != 0:
            log.seek(0)
            print(log.read()[-4000:])
            print(f"mutmut run failed with exit status {run.returncode}")
            return 1
    mutmut_seconds = time.monotonic() - started

    scores = {m: Score(m) for m in modules}
    problems: list[str] = []
    survivors: list[str] = []
    for module in modules:
        score, source = scores[module], MUTANTS / module
        exit_codes: dict[str, int | None] = json.loads(Path(f"{source}.meta").read_text())["exit_code_by_key"]
        functions = _functions(source.read_text())
        for name, code in sorted(exit_codes.items()):
            score.total += 1
            line = _changed_line(functions, name)
            known = EQUIVALENT.get(name)
            if known is not None:
                score.excluded += 1
                if line != known.line:
                    problems.append(f"stale EQUIVALENT entry {name}: it now changes {line!r}, not {known.line!r}")
                elif code in KILLED:
                    problems.append(f"EQUIVALENT entry {name} is killed by the tests: remove it")
                continue
            if code in KILLED:
                score.killed += 1
            else:
                survivors.append(f"  {STATUS.get(code, 'suspicious'):9} {name}: {line}")
        stale = [n for n in EQUIVALENT if n.startswith(_dotted(module) + ".") and n not in exit_codes]
        problems += [f"EQUIVALENT entry {n} names no mutant of {module}" for n in stale]

    started_constants = time.monotonic()
    outcomes = _run_constant_mutants([None, *CONSTANT_MUTANTS], tests, args.jobs)
    # Control: the unchanged code must pass, or every constant mutant would look caught.
    if outcomes[0] is not False:
        problems.append("the unit tests fail on the unchanged code; constant mutants not judged")
    for mutant, outcome in zip(CONSTANT_MUTANTS, outcomes[1:] if outcomes[0] is False else []):
        if mutant.path not in scores:
            problems.append(f"constant mutant of {mutant.path}, which is not in [tool.mutmut].only_mutate")
            continue
        scores[mutant.path].constants += 1
        if outcome is None:
            problems.append(f"constant mutant {mutant.old!r} -> {mutant.new!r} no longer applies to {mutant.path}")
        elif outcome:
            scores[mutant.path].constants_caught += 1
        else:
            problems.append(f"constant mutant survived in {mutant.path}: {mutant.old!r} -> {mutant.new!r}")
    constants_seconds = time.monotonic() - started_constants

    print(f"{'module':32} {'mutants':>7} {'excluded':>8} {'killed':>6} {'score':>7}   constants caught")
    for score in scores.values():
        print(f"{score.module:32} {score.total:7} {score.excluded:8} {score.killed:6} {score.percent:6.1f}%"
              f"   {score.constants_caught}/{score.constants}")
        if score.percent < args.threshold:
            problems.append(f"{score.module} scores {score.percent:.1f}%, below the threshold {args.threshold:g}%")
    if survivors:
        print("\nnot killed (see `mutmut show <name>`):")
        print("\n".join(survivors))
    print(f"\nmutmut {mutmut_seconds:.0f} s, constant mutants {constants_seconds:.0f} s, {args.jobs} workers")
    for problem in problems:
        print(f"FAIL: {problem}")
    return 1 if problems else 0


def _dotted(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def _functions(source: str) -> dict[str, str]:
    """Every function in mutmut's rewritten module (mutants are functions), by name."""
    tree = ast.parse(source)
    return {node.name: ast.get_source_segment(source, node) or ""
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _changed_line(functions: dict[str, str], mutant: str) -> str:
    """The mutant's changed line, stripped (its first `+` line against the original)."""
    name = mutant.rsplit(".", 1)[1]
    original = functions.get(re.sub(r"__mutmut_\d+$", "__mutmut_orig", name), "")
    mutated = functions.get(name, "")
    for line in difflib.unified_diff(original.splitlines()[1:], mutated.splitlines()[1:], lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:].strip()
    return "(signature changed)"


def _run_constant_mutants(mutants: list[ConstantMutant | None], tests: list[str], jobs: int) -> list[bool | None]:
    """Whether the unit tests fail with each mutant applied (None: it does not apply; None mutant: control).

    Like mutmut, fork per mutant from a process that has already imported the test dependencies,
    so a mutant costs its tests' run time, not an interpreter and a dependency import.
    """
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    # Imported once here and shared by every fork: pytest and, through the conftest, the
    # third-party dependencies.
    importlib.import_module("pytest")
    importlib.import_module("hypothesis")  # its pytest plugin imports it at the end of every session
    importlib.import_module("tests.conftest")

    # Forget the project's own modules so that each fork imports them afresh, one of them mutated.
    for name in [n for n in sys.modules if n.split(".")[0] in ("gateway", "tests")]:
        del sys.modules[name]
    outcomes: list[bool | None] = [None] * len(mutants)
    running: dict[int, tuple[int, float]] = {}
    pending = list(enumerate(mutants))
    while pending or running:
        while pending and len(running) < jobs:
            index, mutant = pending.pop(0)
            source = None
            if mutant is not None:
                text = (ROOT / mutant.path).read_text()
                if text.count(mutant.old) != 1:
                    continue
                source = text.replace(mutant.old, mutant.new)
            pid = os.fork()
            if pid == 0:
                os._exit(_child(mutant, source, tests if mutant is None else _own_tests(mutant.path, tests)))
            running[pid] = (index, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for child, (index, started) in list(running.items()):
                if time.monotonic() - started > CONSTANT_TIMEOUT_S:  # a hang is a failing test too
                    os.kill(child, signal.SIGKILL)
            time.sleep(0.02)
            continue
        index, _ = running.pop(pid)
        outcomes[index] = not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
    return outcomes


def _own_tests(module: str, tests: list[str]) -> list[str]:
    """The module's mirrored test file (gateway/a/b.py -> tests/a/test_b.py) when it is selected, else all."""
    parts = Path(module).parts
    mirrored = str(Path("tests", *parts[1:-1], f"test_{parts[-1]}"))
    return [mirrored] if mirrored in tests else tests


def _child(mutant: ConstantMutant | None, source: str | None, tests: list[str]) -> int:
    """In the fork: put the mutated module in place, then run the unit tests quietly."""
    import pytest

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        if mutant is not None and source is not None:
            name = _dotted(mutant.path)
            parent, _, leaf = name.rpartition(".")
            package = importlib.import_module(parent)
            module = types.ModuleType(name)
            module.__file__ = str(ROOT / mutant.path)
            sys.modules[name] = module
            exec(compile(source, module.__file__, "exec"), module.__dict__)
            setattr(package, leaf, module)
        # Pass or fail is all that counts here: no assertion rewriting, no report.
        return int(pytest.main(["-q", "-x", "-p", "no:cacheprovider", "--assert=plain", *tests]))
    except BaseException:  # a mutant that breaks the import is caught
        return 99


if __name__ == "__main__":
    sys.exit(main())
