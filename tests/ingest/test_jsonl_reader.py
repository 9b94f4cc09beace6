"""A large JSONL file parsed ahead by a child process gives the same documents, and the same error at
the same line, as the file read in this process."""

import base64
import json
import sys

import numpy as np
import pytest

from gateway.errors import InvalidInput
from gateway.ingest import jsonl_reader
from gateway.ingest.loaders import load_paths
from gateway.storage.vectors import VectorEncoding, unit_length, vector_digest


def _b64(values) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def _lines(count: int, encode=lambda v: v) -> list[str]:
    rng = np.random.default_rng(2)
    out = []
    for i in range(count):
        vectors = rng.standard_normal((3, 4)).astype(np.float32).tolist()
        out.append(json.dumps({"_id": f"d{i}", "title": f"T{i}", "metadata": {"ok": i % 2 == 0},
                               "chunks": [{"text": f"chunk {i}.{j}", "vector": encode(v), **({"parent": 0} if i % 3 else {})}
                                          for j, v in enumerate(vectors)]}))
        if i % 7 == 0:
            out.append("   ")
    return out


def _stored(chunk):
    """A chunk's vector as ingest stores it, and its digest: the child sends both computed (`digest` set)."""
    if chunk.digest:
        assert chunk.digest == vector_digest(chunk.vector)
        return chunk.vector.tobytes(), chunk.digest
    vector = unit_length(chunk.vector)
    return vector.tobytes(), vector_digest(vector)


def _read(path, monkeypatch, ahead: bool):
    monkeypatch.setattr(jsonl_reader, "READ_AHEAD_BYTES", 0 if ahead else 1 << 40)
    docs = []
    try:
        for doc in load_paths([path]):
            docs.append((doc.source_id, doc.title, dict(doc.metadata),
                         [(c.text, _stored(c), c.parent) for c in doc.chunks]))
    except InvalidInput as exc:
        return docs, exc.message
    return docs, None


@pytest.mark.parametrize("encode", [lambda v: v, _b64], ids=["lists", "base64"])
def test_a_file_read_ahead_gives_the_documents_read_here(tmp_path, monkeypatch, encode):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(_lines(300, encode)) + "\n", encoding="utf-8")
    ahead, here = _read(corpus, monkeypatch, ahead=True), _read(corpus, monkeypatch, ahead=False)
    assert ahead == here and len(here[0]) == 300 and here[1] is None
    monkeypatch.setattr(jsonl_reader, "READ_AHEAD_BYTES", 0)
    assert all(c.digest for d in load_paths([corpus]) for c in d.chunks)  # scaled and hashed by the child
    monkeypatch.setattr(jsonl_reader, "READ_AHEAD_BYTES", 0)
    assert all(line.decoded is VectorEncoding.of(encode([1.0])) for line in jsonl_reader.lines(corpus))


BAD = [
    '{"_id": "x", "chunks": [{"text": "t", "vector": [1.0, NaN]}]}',  # orjson refuses it, json reads it
    '{"_id": "x", "chunks": [{"text": "t", "vector": [1.0, 2.0]}, {"text": "u", "vector": "AACAPwAAAEA="}]}',
    '{"_id": "x", "chunks": [{"text": "t", "vector": "AACAPwAAAE="}]}',
    '{"_id": "x", "chunks": [{"text": "t", "vector": [1.0, true]}]}',
    '{"_id": "x", "vector": [1.0, 2.0]}',
    '{"_id": "x", "text": "t", "vector": "AACAPwAAAEA="}',  # base64 after lines of lists
    '{"_id": "x", "chunks": [{"text": "t", "vector": [0.0, 0.0]}]}',
    '{"_id": "x", "chunks": [{"text": "t", "vector": [1e39, 0.0]}]}',
    '{"_id": "x", "chunks": "no"}',
    '{"_id": "x", "chunks": [1]}',
    '["not", "an", "object"]',
    '{"_id": "x", "chunks": [{"text": "t", "vector": [1.0, 2.0]}',
]


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_line_read_ahead_is_the_same_error_at_the_same_line(tmp_path, monkeypatch, bad):
    corpus = tmp_path / "corpus.jsonl"
    lines = _lines(150)
    corpus.write_text("\n".join(lines[:120] + [bad] + lines[120:]) + "\n", encoding="utf-8")
    ahead, here = _read(corpus, monkeypatch, ahead=True), _read(corpus, monkeypatch, ahead=False)
    assert here[1] is not None and here[1].startswith(f"{corpus}:{lines[:120].__len__() + 1}: ")
    assert ahead == here


def test_a_line_that_is_not_utf8_read_ahead_is_the_same_error(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(("\n".join(_lines(80)) + "\n").encode() + b'{"_id": "b", "text": "caf\xe9"}\n')
    ahead, here = _read(corpus, monkeypatch, ahead=True), _read(corpus, monkeypatch, ahead=False)
    assert "not UTF-8" in here[1] and ahead == here


def test_when_the_reader_dies_the_rest_of_the_file_is_read_here(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(_lines(300)) + "\n", encoding="utf-8")
    here = _read(corpus, monkeypatch, ahead=False)
    # A child that sends its first block and then exits, as one killed mid-file would.
    dying = ("import os, sys; from gateway.ingest import jsonl_reader as r; "
             "lines = [l for _, l in zip(range(r.BLOCK), r._parsed(r.Path(sys.argv[1]), decode=True))]; "
             "sys.stdout.buffer.write(r._frame(lines)); "
             "sys.stdout.flush(); os._exit(1)")
    monkeypatch.setattr(jsonl_reader, "_command", lambda path: [sys.executable, "-c", dying, str(path)])
    assert _read(corpus, monkeypatch, ahead=True) == here


def test_a_reader_started_ahead_gives_the_documents_read_here_and_is_taken_once(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(_lines(300)) + "\n", encoding="utf-8")
    here = _read(corpus, monkeypatch, ahead=False)
    monkeypatch.setattr(jsonl_reader, "READ_AHEAD_BYTES", 0)
    with jsonl_reader.ReadAhead([corpus, tmp_path / "missing.jsonl"]) as ahead:
        child = ahead._children[corpus.resolve()]
        docs = [(d.source_id, d.title, dict(d.metadata), [(c.text, _stored(c), c.parent) for c in d.chunks])
                for d in load_paths([corpus], ahead=ahead)]
        assert ahead.take(corpus) is None  # taken by the load
    assert (docs, None) == here and child.returncode is not None


def test_a_reader_started_ahead_and_never_read_is_stopped_on_close(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(_lines(300)) + "\n", encoding="utf-8")
    monkeypatch.setattr(jsonl_reader, "READ_AHEAD_BYTES", 0)
    started = []
    monkeypatch.setattr(jsonl_reader, "_start", lambda path, start=jsonl_reader._start: started.append(start(path))
                        or started[-1])
    with jsonl_reader.ReadAhead([corpus, tmp_path / "." / "corpus.jsonl"]) as ahead:  # one file, named twice
        assert list(ahead._children.values()) == started
    assert len(started) == 1 and started[0].returncode is not None


def test_the_reader_holds_messages_up_to_its_limit_while_the_pipe_is_full():
    """The child parses on while this process writes a round: sends return until `limit` bytes wait."""
    import os
    import threading

    read_end, write_end = os.pipe()
    out = os.fdopen(write_end, "wb", buffering=0)
    message = b"x" * (1 << 20)  # far more than a pipe holds
    sender = jsonl_reader._Sender(out, limit=8 << 20)
    for _ in range(7):
        sender.send(message)  # nothing reads the pipe yet: these wait in the sender
    blocked = threading.Thread(target=sender.send, args=(message + message,), daemon=True)
    blocked.start()
    blocked.join(0.5)
    assert blocked.is_alive()  # 7 MB held: 2 MB more would pass the limit
    received = bytearray()
    with os.fdopen(read_end, "rb") as pipe:
        while len(received) < 9 << 20:  # reading frees room: the blocked send goes through
            received += pipe.read(1 << 16)
        blocked.join(5)
        sender.close()
        out.close()
        received += pipe.read()
    assert not blocked.is_alive() and bytes(received) == message * 9


def test_the_reader_stops_with_a_broken_pipe_when_nothing_reads_any_more():
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    sender = jsonl_reader._Sender(os.fdopen(write_end, "wb", buffering=0), limit=1 << 20)
    sender.send(b"x" * 10)
    with pytest.raises(BrokenPipeError):
        sender.close()
