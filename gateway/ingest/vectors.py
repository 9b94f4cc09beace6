"""Chunks that bring their own vectors: a client that embeds with its own model sends its chunks
and their dense vectors, and the gateway stores them as they are (no embedder call).

A document with `chunks` is not cut by the chunker: each given chunk is one stored chunk (ids "0",
"1", ... in order). Parents group them: a chunk's `parent` (an index) names its parent, every
chunk of a document gives one or none does; without, consecutive chunks are packed into parents
of at most the collection's `parent_chars`, as the chunker packs text. A parent's text is its
chunks' texts joined in order. The content hash covers the vector (its float32 bytes), so a chunk
re-sent with the same text and vector is not rewritten and a changed vector is a change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gateway.errors import InvalidInput
from gateway.ingest.chunker import Chunk, Chunked
from gateway.storage.schema import MAX_TEXT
from gateway.tenancy.config import ChunkingConfig


@dataclass(frozen=True, slots=True)
class VectorChunk:
    """One chunk as a client cut and embedded it."""

    text: str
    vector: np.ndarray = field(repr=False, compare=False)
    # Index of the chunk's parent within its document; None: packed by size (module docstring).
    parent: int | None = None
    # The vector's `vector_digest` when `vector` is already scaled to length 1, as stored (the JSONL
    # reader's child computes both on the other core); empty: ingest scales and hashes it.
    digest: str = ""


def chunk_given(chunks: Sequence[VectorChunk], config: ChunkingConfig, where: str) -> Chunked:
    """The document's parents and chunks, as the chunker's `Chunked` (checked: texts, parent indices)."""
    if not chunks:
        raise InvalidInput(f"{where}: chunks is empty; send at least one, or `text` without chunks")
    given = [c.parent is not None for c in chunks]
    if any(given) and not all(given):
        missing = given.index(False)
        raise InvalidInput(f"{where}: chunk {missing} has no parent while others have one; give every chunk a "
                           "parent index, or none (then chunks are grouped into parents by size)")
    for index, chunk in enumerate(chunks):
        if not chunk.text.strip():
            raise InvalidInput(f"{where}: text of chunk {index} is empty; a chunk needs text (its hit's content)")
        size = len(chunk.text.encode("utf-8", "surrogatepass"))
        if size > MAX_TEXT:
            raise InvalidInput(f"{where}: text of chunk {index} is {size} bytes; at most {MAX_TEXT}")
    if all(given):
        return _explicit(chunks, where)
    return _packed(chunks, config.parent_chars)


def _explicit(chunks: Sequence[VectorChunk], where: str) -> Chunked:
    order: dict[int, int] = {}
    for index, chunk in enumerate(chunks):
        assert chunk.parent is not None
        if chunk.parent < 0:
            raise InvalidInput(f"{where}: parent of chunk {index} is {chunk.parent}; allowed: 0 or more")
        order.setdefault(chunk.parent, len(order))
    texts: list[list[str]] = [[] for _ in order]
    children = []
    for index, chunk in enumerate(chunks):
        slot = order[chunk.parent]  # type: ignore[index]
        texts[slot].append(chunk.text)
        children.append(Chunk(str(index), slot, chunk.text))
    parents = tuple(" ".join(t) for t in texts)
    for slot, text in enumerate(parents):
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT:
            raise InvalidInput(f"{where}: the chunks of parent {list(order)[slot]} make {len(text)} characters; "
                               f"a parent holds at most {MAX_TEXT} bytes; split it")
    return Chunked(parents, tuple(children))


def _packed(chunks: Sequence[VectorChunk], limit: int) -> Chunked:
    parents: list[str] = []
    children = []
    current: list[str] = []
    size = 0
    for index, chunk in enumerate(chunks):
        added = len(chunk.text) + (1 if current else 0)
        if current and size + added > limit:
            parents.append(" ".join(current))
            current, size, added = [], 0, len(chunk.text)
        current.append(chunk.text)
        size += added
        children.append(Chunk(str(index), len(parents), chunk.text))
    parents.append(" ".join(current))
    return Chunked(tuple(parents), tuple(children))
