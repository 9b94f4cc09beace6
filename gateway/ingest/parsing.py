"""Uploaded files to documents, each PDF or HTML file parsed in its own killable process.

Parsing is CPU-bound pure Python (pypdf) or C (lxml) that no event loop or thread can
interrupt: in the serving process one hostile file holds the interpreter for minutes and its
memory for good. A child process per file is the unit the kernel can bound and kill: CPU time
and address space limits it sets itself (parse_worker.py), and a wall-clock timeout here. What a
budget stops fails that file with `OverBudget` naming the budget; the job's other files go on.
Text files (.md, .txt) are only decoded, in the caller's thread.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from gateway.children import environment, python_module
from gateway.errors import StorageUnavailable
from gateway.ingest.formats import (HTML_SUFFIXES, PDF_SUFFIXES, Extracted, OverBudget, ParseBudget, Unreadable)
from gateway.ingest.loaders import Document, document_from_bytes, document_from_extracted

# Start-up (the interpreter and pypdf or trafilatura, ~0.3 to 0.7 s) and a busy machine's waits
# come on top of the CPU-time budget before the wall clock stops a parse.
_WALL_FACTOR = 3
_WALL_SLACK_S = 10.0


@dataclass(frozen=True, slots=True)
class Upload:
    """One uploaded file as it arrived (decoded from base64, not yet parsed)."""

    name: str
    source_id: str
    data: bytes = field(repr=False)


class Parser:
    """Parses uploads within a ParseBudget; `close()` kills the parses under way (shutdown)."""

    def __init__(self, budget: ParseBudget = ParseBudget()) -> None:
        self.budget = budget
        self._children: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def parse(self, upload: Upload) -> Document:
        """The upload's document (blocking: call it in a thread); Unreadable or OverBudget says why not."""
        suffix = Path(upload.name).suffix.lower()
        if suffix not in PDF_SUFFIXES and suffix not in HTML_SUFFIXES:
            return document_from_bytes(upload.name, upload.data, upload.source_id)
        extracted = self._in_child("pdf" if suffix in PDF_SUFFIXES else "html", upload)
        return document_from_extracted(upload.name, extracted, upload.source_id)

    def close(self) -> None:
        """Kill every parse under way; later parses fail at once (the process is stopping)."""
        with self._lock:
            self._closed = True
            children = list(self._children)
        for child in children:
            _kill(child)

    def _in_child(self, kind: str, upload: Upload) -> Extracted:
        budget = self.budget
        command = python_module("gateway.ingest.parse_worker", kind, json.dumps({
            "pages": budget.pages, "inflated_bytes": budget.inflated_bytes, "text_bytes": budget.text_bytes,
            "html_depth": budget.html_depth, "seconds": budget.seconds, "memory_mb": budget.memory_mb}))
        with self._lock:
            if self._closed:
                raise _stopped(upload)
            # A process group of its own: a terminal's Ctrl-C reaches the server, which then kills the
            # parse. The server's session: where the kernel shares the CPU between sessions first
            # (autogroup, Linux's default outside a cgroup of one's own), a nice counts only against
            # the tasks of one session, and a parse in a session of its own took as much CPU as the
            # whole serving process despite its nice.
            child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=environment(), process_group=0)
            self._children.add(child)
        wall = budget.seconds * _WALL_FACTOR + _WALL_SLACK_S
        try:
            out, err = child.communicate(upload.data, timeout=wall)
        except subprocess.TimeoutExpired:
            _kill(child)
            raise budget.exceeded(f"parsing it took more than {wall:g} s of wall-clock time (the CPU-time "
                                  f"budget is {budget.seconds:g} s)", budget.seconds, "PARSE_SECONDS") from None
        finally:
            with self._lock:
                self._children.discard(child)
        if self._closed and child.returncode != 0:
            raise _stopped(upload)
        if child.returncode == -signal.SIGXCPU:
            raise budget.exceeded(f"parsing it took more than {budget.seconds:g} s of CPU time", budget.seconds,
                                  "PARSE_SECONDS")
        if child.returncode == -signal.SIGKILL:
            raise OverBudget("its parse was killed (SIGKILL: the kernel's out-of-memory killer, or the CPU-time "
                             f"hard limit of {budget.seconds:g} s + 1 (GATEWAY_UPLOAD_PARSE_SECONDS))")
        if child.returncode != 0:
            if b"MemoryError" in err:
                raise budget.exceeded(f"parsing it needs more than {budget.memory_mb} MiB of memory",
                                      budget.memory_mb, "PARSE_MEMORY_MB")
            last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
            raise Unreadable(f"the {kind.upper()} parser stopped (exit status {child.returncode}: {last[0][:300]})")
        answer = json.loads(out)
        if "reason" in answer:
            raise (OverBudget if answer["code"] == OverBudget.code else Unreadable)(answer["reason"])
        return Extracted(text=answer["text"], title=answer["title"], pages=tuple(answer["pages"]))


def _stopped(upload: Upload) -> StorageUnavailable:
    return StorageUnavailable(f"the gateway process stopped while parsing {upload.name!r}; start the job again "
                              "(documents already written are skipped by their content hash)")


def _kill(child: subprocess.Popen[bytes]) -> None:
    try:
        child.kill()
    except ProcessLookupError:
        pass
