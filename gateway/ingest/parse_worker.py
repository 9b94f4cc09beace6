"""The child process that parses one uploaded PDF or HTML file (started by ingest/parsing.py).

`python -m gateway.ingest.parse_worker <pdf|html> <budget JSON>`: the file's bytes on stdin, one
JSON object on stdout, either {"text", "title", "pages"} or {"code", "reason"}. The process
lowers its own priority and limits its own CPU time and address space after its imports, so the
budget is the parse's alone; the kernel stops it (SIGXCPU) when the CPU time is spent, and the
parent kills it when the wall-clock time is.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys

from gateway.ingest.formats import ParseBudget, Unreadable, read_html, read_pdf

# Below the serving process, so a parse takes the CPU readers leave (nice 0 is the default).
NICENESS = 10


def main(argv: list[str]) -> int:
    kind, budget = argv[0], ParseBudget(**json.loads(argv[1]))
    if kind == "pdf":
        import pypdf  # noqa: F401  (imported before the limits, which are the parse's alone)
    else:
        import trafilatura  # noqa: F401
    _limit(budget)
    data = sys.stdin.buffer.read()
    try:
        extracted = read_pdf(data, budget) if kind == "pdf" else read_html(data, budget)
        answer = {"text": extracted.text, "title": extracted.title, "pages": list(extracted.pages)}
    except MemoryError:
        answer = _failure(budget.exceeded(f"parsing it needs more than {budget.memory_mb} MiB of memory",
                                          budget.memory_mb, "PARSE_MEMORY_MB"))
    except Unreadable as exc:
        answer = _failure(exc)
    except RecursionError as exc:
        answer = _failure(Unreadable(f"not a readable {kind.upper()} (nested too deeply: {exc})"))
    sys.stdout.write(json.dumps(answer, ensure_ascii=True))
    return 0


def _failure(exc: Unreadable) -> dict[str, str]:
    return {"code": str(exc.code), "reason": exc.reason}


def _limit(budget: ParseBudget) -> None:
    try:
        os.nice(NICENESS)
    except OSError:
        pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a stopped parse leaves no core file behind
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = math.ceil(usage.ru_utime + usage.ru_stime + budget.seconds)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at the soft limit, SIGKILL at the hard
    memory = _address_space() + budget.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def _address_space() -> int:
    """This process's virtual size now (its imports), so the budget is what parsing adds."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except OSError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
