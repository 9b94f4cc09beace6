"""The lines of a JSONL file, parsed, and for a large file parsed ahead in a child process.

A bulk load of vectors spends about a third of its time turning JSON lines into records and their
vectors into float32 arrays (benchmarks/bulk_vectors.py, py-spy). For a file of READ_AHEAD_BYTES or
more, a child process (`python -m gateway.ingest.jsonl_reader <path>`, importing only orjson, numpy
and storage/vectors.py) does that on the machine's other core while this process checks, hashes
and writes the lines before, and sends blocks of parsed lines through a pipe, which holds it at
most a block or two ahead.

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson

from gateway.errors import InvalidInput
from gateway.storage.vectors import VectorEncoding, read_vector

log = logging.getLogger(__name__)

# Below this size a file is read in this process: a child's start (about 0.3 s of its CPU) is not
# worth it, and the progress bar moves from the first line.
READ_AHEAD_BYTES = 16 * 1024 * 1024
# Lines per message from the child: about 1 MB of 5-chunk 384-d lines, a few milliseconds to unpickle.
BLOCK = 64
_FRAME = struct.Struct("<Q")


class Line(NamedTuple):
    """One non-blank line: its number, its record (or its bytes when orjson could not read it), the
    encoding of its vectors when they are decoded already (None: as the file gave them), and whether
    it may hold a JSON boolean (it has `true` or `false` somewhere)."""

    number: int
    record: Any
    decoded: VectorEncoding | None
    may_hold_bool: bool


def lines(path: Path) -> Iterator[Line]:
    """The file's lines, parsed; by a child process when the file is large and there is a second core."""
    if (os.cpu_count() or 1) > 1 and path.stat().st_size >= READ_AHEAD_BYTES:
        return _read_ahead(path)
    return _parsed(path, decode=False)


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


def _decode(record: Any, may_hold_bool: bool) -> VectorEncoding | None:
    """The record's vectors as float32 arrays in place, and their encoding; None (the record as it was)
    unless every vector is there, in one encoding, and reads."""
    if not isinstance(record, dict):
        return None
    chunks, vector = record.get("chunks"), record.get("vector")
    if chunks is None:
        holders = [record] if vector is not None else []
    elif vector is None and isinstance(chunks, list) and all(isinstance(c, dict) for c in chunks):
        holders = chunks
    else:
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
    return [sys.executable, "-m", "gateway.ingest.jsonl_reader", str(path)]


def _read_ahead(path: Path) -> Iterator[Line]:
    child = subprocess.Popen(_command(path), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert child.stdout is not None
    last = 0
    try:
        while True:
            header = child.stdout.read(_FRAME.size)
            if len(header) < _FRAME.size:
                break
            block: list[tuple] = pickle.loads(child.stdout.read(_FRAME.unpack(header)[0]))
            if not block:  # the end of the file
                return
            for fields in block:
                line = Line._make(fields)
                last = line.number
                yield line
    finally:
        child.stdout.close()
        if child.poll() is None:
            child.kill()
        child.wait()
    # The child ended before the end of the file (killed, out of memory): the rest is read here.
    log.warning("the reader of %s stopped after line %d (exit %s); reading the rest in this process",
                path, last, child.returncode)
    yield from _parsed(path, decode=False, after=last)


def main(argv: list[str]) -> int:
    out = sys.stdout.buffer
    block: list[Line] = []

    def send(lines: list[Line]) -> None:
        # Plain tuples: run as __main__, this module's Line is not the class the reader unpickles.
        blob = pickle.dumps([tuple(line) for line in lines], protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_FRAME.pack(len(blob)) + blob)

    try:
        for line in _parsed(Path(argv[0]), decode=True):
            block.append(line)
            if len(block) >= BLOCK:
                send(block)
                block = []
        if block:
            send(block)
        send([])
        out.flush()
    except BrokenPipeError:  # the reader stopped reading (an error in an earlier line): nothing to say
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
