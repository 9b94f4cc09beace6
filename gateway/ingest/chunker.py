"""Parent/child chunking on paragraph and sentence boundaries.

A document is cut into parents of at most `parent_chars`; each parent into children of at
most `child_chars`, consecutive children sharing up to `child_overlap` characters of whole
sentences. Children are what is embedded and searched; parents are stored for expansion.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.tenancy.config import ChunkingConfig

_PARAGRAPHS = re.compile(r"\n\s*\n")
# A sentence ends at . ! ? followed by whitespace and an upper-case letter, digit or quote.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")


@dataclass(frozen=True, slots=True)
class Chunk:
    chunk_id: str
    parent_index: int
    text: str
    # 1-based page of a paged document (chunk_pages); None for a flow of text.
    page: int | None = None


@dataclass(frozen=True, slots=True)
class Chunked:
    parents: tuple[str, ...]
    children: tuple[Chunk, ...]


def chunk_text(text: str, config: ChunkingConfig) -> Chunked:
    units = _units(text, config.child_chars)
    if not units:
        return Chunked((), ())
    parents = _pack(units, config.parent_chars, overlap=0)
    children: list[Chunk] = []
    for index, parent_units in enumerate(parents):
        for piece in _pack(parent_units, config.child_chars, config.child_overlap):
            children.append(Chunk(str(len(children)), index, " ".join(piece)))
    return Chunked(tuple(_join(p) for p in parents), tuple(children))


def chunk_pages(pages: Sequence[str], config: ChunkingConfig) -> Chunked:
    """Each page cut on its own, so a chunk (and its parent) never spans two pages and can cite
    its page; chunk ids and parent indices run on across pages as in `chunk_text`."""
    parents: list[str] = []
    children: list[Chunk] = []
    for number, page in enumerate(pages, start=1):
        cut = chunk_text(page, config)
        offset, first = len(parents), len(children)
        parents.extend(cut.parents)
        children.extend([Chunk(str(first + i), offset + child.parent_index, child.text, number)
                         for i, child in enumerate(cut.children)])
    return Chunked(tuple(parents), tuple(children))


def _join(units: list[str]) -> str:
    return " ".join(units)


def _units(text: str, limit: int) -> list[str]:
    """Sentences (paragraph breaks kept as boundaries), each at most `limit` characters."""
    units: list[str] = []
    for paragraph in _PARAGRAPHS.split(text):
        paragraph = " ".join(paragraph.split())
        if not paragraph:
            continue
        for sentence in _SENTENCE_END.split(paragraph):
            units.extend(_hard_split(sentence, limit))
    return units


def _hard_split(sentence: str, limit: int) -> list[str]:
    """A sentence longer than a chunk is cut between words (or mid-word, for a giant token)."""
    if len(sentence) <= limit:
        return [sentence]
    pieces, current = [], ""
    for word in sentence.split(" "):
        while len(word) > limit:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(word[:limit])
            word = word[limit:]
        candidate = f"{current} {word}" if current else word
        if len(candidate) > limit:
            pieces.append(current)
            current = word
        else:
            current = candidate
    if current:
        pieces.append(current)
    return pieces


def _pack(units: list[str], limit: int, overlap: int) -> list[list[str]]:
    """Greedy packing of units into groups of at most `limit` characters (joined by spaces)."""
    groups: list[list[str]] = []
    current: list[str] = []
    size = 0
    for unit in units:
        added = len(unit) + (1 if current else 0)
        if current and size + added > limit:
            groups.append(current)
            current, size = _tail(current, overlap, limit - len(unit) - 1)
            added = len(unit) + (1 if current else 0)
        current.append(unit)
        size += added
    if current:
        groups.append(current)
    return groups


def _tail(units: list[str], overlap: int, room: int) -> tuple[list[str], int]:
    """The last whole units of a group, up to `overlap` characters, that still leave room."""
    tail: list[str] = []
    size = 0
    budget = min(overlap, room)
    for unit in reversed(units):
        added = len(unit) + (1 if tail else 0)
        if size + added > budget:
            break
        tail.insert(0, unit)
        size += added
    return tail, size
