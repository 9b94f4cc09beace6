"""The lines of a JSONL file, parsed, and for a large file parsed ahead in a child process.

A bulk load of vectors spends about a third of its time turning JSON lines into records and their
vectors into float32 arrays (benchmarks/bulk_vectors.py, py-spy). For a file of READ_AHEAD_BYTES or
more, a child process (`python -m gateway.ingest.jsonl_reader <path>`, importing only orjson, numpy
and storage/vectors.py) does that on the machine's other core while this process checks, hashes
and writes the lines before. The child parses up to AHEAD_BYTES ahead of what this process has
taken (a thread of its own writes to the pipe), so it parses the next round of a bulk load while
this process writes one, and parses the first lines while this process starts up (`ReadAhead`).

The child only does what cannot fail differently: a line orjson cannot read travels as its bytes,
and a record's vectors are decoded only when every one of them reads (one encoding, finite numbers).
What it leaves as it was is read here by loaders.py exactly as without a child, so every line
gives the same document or the same error, in the same order. If the child dies, the lines after
the last one it sent are read here.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import orjson

from gateway.children import environment, python_module
from gateway.errors import InvalidInput
from gateway.storage.vectors import VectorEncoding, read_vector, unit_length, vector_digest

log = logging.getLogger(__name__)

# Below this size a file is read in this process: a child's start (about 0.3 s of its CPU) is not
# worth it, and the progress bar moves from the first line.
READ_AHEAD_BYTES = 16 * 1024 * 1024
# Lines per message from the child: about 1 MB of 5-chunk 384-d lines, a few milliseconds to unpickle.
BLOCK = 64
# Pickled messages the child may hold parsed and not yet taken: a round of a bulk load is 16,384
# chunks (ingest/sync.py), about 32 MB of messages with 384-d vectors. With the pipe alone (a
# message or two), the child idled while this process wrote a round and this process then waited
# for the next round's lines: 2.2 s of a 50,000-chunk load (benchmarks/bulk_vectors.py).
AHEAD_BYTES = 64 * 1024 * 1024
_FRAME = struct.Struct("<Q")


class Line(NamedTuple):
    """One non-blank line: its number, its record (or its bytes when orjson could not read it), the
    encoding of its vectors when they are decoded already (None: as the file gave them; decoded, each
    vector of the record is a `Stored`), and whether it may hold a JSON boolean (it has `true` or
    `false` somewhere)."""

    number: int
    record: Any
    decoded: VectorEncoding | None
    may_hold_bool: bool


class Stored(NamedTuple):
    """A decoded vector as ingest stores it (scaled to length 1) and its `vector_digest`, computed by the child."""

    vector: np.ndarray
    digest: str


class ReadAhead:
    """Child readers started for the large JSONL files among `paths` before anything reads them, so
    they parse while this process imports and opens the store; `lines` takes a started one. Closing
    stops the children nothing took.

        with ReadAhead(paths) as ahead:
            ...  # heavy imports, open the store
            for doc in load_paths(paths, ahead=ahead): ...
    """

    def __init__(self, paths: Sequence[Path]) -> None:
        self._children: dict[Path, subprocess.Popen[bytes]] = {}
        for path in paths:
            if path.suffix.lower() == ".jsonl" and path.resolve() not in self._children and _worth_a_child(path):
                self._children[path.resolve()] = _start(path)

    def take(self, path: Path) -> subprocess.Popen[bytes] | None:
        return self._children.pop(path.resolve(), None)

    def close(self) -> None:
        for child in self._children.values():
            _stop(child)
        self._children.clear()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def lines(path: Path, ahead: ReadAhead | None = None) -> Iterator[Line]:
    """The file's lines, parsed; by a child process when the file is large and there is a second core
    (the one `ahead` started for it, if any)."""
    child = ahead.take(path) if ahead is not None else None
    if child is not None:
        return _read_ahead(path, child)
    if _worth_a_child(path):
        return _read_ahead(path, None)
    return _parsed(path, decode=False)


def _worth_a_child(path: Path) -> bool:
    try:
        return (os.cpu_count() or 1) > 1 and path.is_file() and path.stat().st_size >= READ_AHEAD_BYTES
    except OSError:  # read (and reported) as the file it is
        return False


def _parsed(path: Path, *, decode: bool, after: int = 0) -> Iterator[Line]:
    """`decode`: vectors decoded here (the child's work); without, loaders.py reads them as it reads
    the rest. `after`: lines up to that number are skipped (a child sent them)."""
    # Bytes: orjson reads UTF-8 itself, and a line of vectors is tens of KB that a text file would decode first.
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if number <= after or line.isspace():
                continue
            # A line without `true` or `false` holds no JSON boolean: its vectors' elements need no type check.
            may_hold_bool = b"true" in line or b"false" in line
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                yield Line(number, line, None, may_hold_bool)
                continue
            yield Line(number, record, _decode(record, may_hold_bool) if decode else None, may_hold_bool)


def _holders(record: Any) -> list[dict[str, Any]] | None:
    """The dicts of a record that hold its vectors (its chunks, or the record itself); None when the
    record's shape is one that loaders.py refuses or that brings no vectors."""
    if not isinstance(record, dict):
        return None
    chunks, vector = record.get("chunks"), record.get("vector")
    if chunks is None:
        return [record] if vector is not None else []
    if vector is None and isinstance(chunks, list) and all(isinstance(c, dict) for c in chunks):
        return chunks
    return None


def _decode(record: Any, may_hold_bool: bool) -> VectorEncoding | None:
    """The record's vectors as float32 arrays in place, and their encoding; None (the record as it was)
    unless every vector is there, in one encoding, and reads."""
    holders = _holders(record)
    if holders is None:
        return None
    encodings = {VectorEncoding.of(h.get("vector")) for h in holders}
    if len(encodings) != 1 or None in encodings:
        return None
    try:
        arrays = [read_vector(h["vector"], "", may_hold_bool=may_hold_bool) for h in holders]
    except InvalidInput:
        return None
    for holder, array in zip(holders, arrays):
        holder["vector"] = array
    return encodings.pop()


def _command(path: Path) -> list[str]:
    return python_module("gateway.ingest.jsonl_reader", str(path))


def _start(path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(_command(path), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=environment())


def _stop(child: subprocess.Popen[bytes]) -> None:
    assert child.stdout is not None
    child.stdout.close()
    if child.poll() is None:
        child.kill()
    child.wait()


def _read_ahead(path: Path, child: subprocess.Popen[bytes] | None) -> Iterator[Line]:
    child = child or _start(path)
    assert child.stdout is not None
    last = 0
    try:
        while True:
            header = child.stdout.read(_FRAME.size)
            if len(header) < _FRAME.size:
                break
            block = _unframe(child.stdout.read(_FRAME.unpack(header)[0]))
            if not block:  # the end of the file
                return
            for line in block:
                last = line.number
                yield line
    finally:
        _stop(child)
    # The child ended before the end of the file (killed, out of memory): the rest is read here.
    log.warning("the reader of %s stopped after line %d (exit %s); reading the rest in this process",
                path, last, child.returncode)
    yield from _parsed(path, decode=False, after=last)


def _frame(lines: Sequence[Line]) -> bytes:
    """One message of the child: its length, then the lines pickled as plain tuples (run as __main__,
    this module's Line is not the class the reader unpickles), with the decoded vectors of the lines
    scaled to length 1 and hashed as ingest stores and hashes them (ingest/sync.py, on this core rather
    than the ingesting process's), taken out into one float32 block (one array to unpickle, not one per
    chunk) and each replaced by its index in the block."""
    vectors: list[np.ndarray] = []
    digests: list[str] = []
    for line in lines:
        if line.decoded is not None:
            for holder in _holders(line.record) or ():
                vectors.append(unit_length(holder["vector"]))
                digests.append(vector_digest(vectors[-1]))
                holder["vector"] = len(vectors) - 1
    offsets = np.cumsum([0] + [v.size for v in vectors]).tolist()
    block = np.concatenate(vectors) if vectors else np.zeros(0, np.float32)
    blob = pickle.dumps(([tuple(line) for line in lines], offsets, block, digests), protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(blob)) + blob


def _unframe(blob: bytes) -> list[Line]:
    """`_frame`'s lines, each decoded vector a `Stored`: a view of the block and its digest."""
    fields, offsets, block, digests = pickle.loads(blob)
    lines = [Line._make(f) for f in fields]
    for line in lines:
        if line.decoded is not None:
            for holder in _holders(line.record) or ():
                index = holder["vector"]
                holder["vector"] = Stored(block[offsets[index]:offsets[index + 1]], digests[index])
    return lines


class _Sender:
    """Writes messages to the pipe from a thread of its own, holding at most `limit` bytes of them
    (one more when a single message is larger), so the caller parses on while the pipe is full."""

    def __init__(self, out: BinaryIO, limit: int) -> None:
        self._out = out
        self._limit = limit
        self._queue: deque[bytes | None] = deque()
        self._held = 0
        self._broken = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="jsonl-sender", daemon=True)
        self._thread.start()

    def send(self, message: bytes | None) -> None:
        """Queue a message (None: the last one was sent; flush); BrokenPipeError once the reader stopped."""
        with self._changed:
            while self._held and self._held + len(message or b"") > self._limit and not self._broken:
                self._changed.wait()
            if self._broken:
                raise BrokenPipeError("the reader closed the pipe")
            self._queue.append(message)
            self._held += len(message or b"")
            self._changed.notify_all()

    def close(self) -> None:
        """Send what is queued, then return; BrokenPipeError if the reader stopped first."""
        self.send(None)
        self._thread.join()
        if self._broken:
            raise BrokenPipeError("the reader closed the pipe")

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue:
                    self._changed.wait()
                message = self._queue[0]
            try:
                if message is None:
                    self._out.flush()
                    return
                self._out.write(message)
            except OSError:  # BrokenPipeError: the reader stopped (an error in an earlier line)
                with self._changed:
                    self._broken = True
                    self._changed.notify_all()
                return
            with self._changed:
                self._queue.popleft()
                self._held -= len(message)
                self._changed.notify_all()


def main(argv: list[str]) -> int:
    sender = _Sender(sys.stdout.buffer, AHEAD_BYTES)
    block: list[Line] = []
    try:
        for line in _parsed(Path(argv[0]), decode=True):
            block.append(line)
            if len(block) >= BLOCK:
                sender.send(_frame(block))
                block = []
        if block:
            sender.send(_frame(block))
        sender.send(_frame([]))
        sender.close()
    except BrokenPipeError:  # the reader stopped reading (an error in an earlier line): nothing to say
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
