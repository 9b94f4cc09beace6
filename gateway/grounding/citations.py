"""Citation validation: does an answer cite only the evidence it was given, and quote it truly?

Pure functions over the answer's text and the evidence (the hits the answer was written from);
deterministic, no model. An answer cites with markers, ``[sourceId/chunkId]`` (the chunk id is
the part after the last slash, so source ids may contain slashes; inside a marker ``\\[``, ``\\]``
and ``\\\\`` stand for ``[``, ``]`` and ``\\``, and any other backslash is itself: `format_marker`
writes what `parse_marker` reads), and may quote: a quoted span directly before a marker or a run
of markers, ``"five business days" [refunds.md/0]``, must occur in one of the chunks that run
cites; a quote may hold several sentences. Quotes and chunks are compared after Unicode (NFKC) and
case folding, with typographic quotes and dashes made plain and whitespace collapsed.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gateway.errors import LimitExceeded

# An answer is prose for a person; 100,000 characters is far beyond one and bounds the work.
MAX_ANSWER_CHARS = 100_000
MAX_EVIDENCE = 200

# Brackets without nesting or line breaks, a backslash taking the character after it along;
# `parse_marker` splits at the last slash. Linear: every character starts exactly one of the two
# alternatives, so nothing backtracks over the answer, whatever it holds.
BRACKETED = re.compile(r"\[((?:[^\[\]\\\n]|\\[^\n]){3,800})\]")
_ESCAPED = re.compile(r"\\([\[\]\\])")
_TO_ESCAPE = re.compile(r"([\[\]\\])")
# Quoted spans, for the sentence splitter: a full stop inside one ends no sentence.
_QUOTED = re.compile(r"\"[^\"\n]{1,2000}\"|“[^”\n]{1,2000}”|«[^»\n]{1,2000}»")
# A quote right before a run of markers: "...", “...”, or «...».
_QUOTE_BEFORE = re.compile(r"(?:\"([^\"\n]{1,2000})\"|“([^”\n]{1,2000})”|«([^»\n]{1,2000})»)\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”»)]*\s+|\n+")
_PLAIN = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "–": "-", "—": "-", "\u00a0": " "})
_SPACE = re.compile(r"\s+")


class CitationStatus(StrEnum):
    VALID = "valid"
    UNKNOWN = "unknown"  # the marker names no chunk of the evidence
    MISQUOTED = "misquoted"  # the quoted span is not in the cited chunk


class SupportVerdict(StrEnum):
    """Whether the cited chunk backs the sentence (gateway/grounding/support.py decides)."""

    SUPPORTED = "supported"
    WEAK = "weak"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True, slots=True)
class SupportThresholds:
    """Scores at or above `supported_at` are SUPPORTED, below `weak_at` UNSUPPORTED, WEAK between."""

    supported_at: float
    weak_at: float


@dataclass(frozen=True, slots=True)
class SupportCheck:
    verdict: SupportVerdict
    score: float
    thresholds: SupportThresholds


@dataclass(frozen=True, slots=True)
class Evidence:
    """A hit the answer was written from."""

    source_id: str
    chunk_id: str
    content: str


@dataclass(frozen=True, slots=True)
class Citation:
    marker: str
    source_id: str
    chunk_id: str
    status: CitationStatus
    sentence: int
    quote: str | None = None
    support: SupportCheck | None = None  # None: not checked (see CitationReport.unchecked)

    @property
    def unsupported(self) -> bool:
        return self.support is not None and self.support.verdict is SupportVerdict.UNSUPPORTED


@dataclass(frozen=True, slots=True)
class Sentence:
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class CitationReport:
    citations: tuple[Citation, ...]
    uncited: tuple[Sentence, ...]
    sentences: tuple[Sentence, ...] = ()
    unchecked: int = 0  # VALID citations whose support was not checked (past the per-call bound)

    @property
    def valid(self) -> bool:
        """Every marker VALID, none judged UNSUPPORTED, and (when required) no sentence uncited."""
        return not self.uncited and all(c.status is CitationStatus.VALID and not c.unsupported for c in self.citations)


def normalise(text: str) -> str:
    """The form quotes and chunks are compared in."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).translate(_PLAIN)).strip().casefold()


def validate_citations(answer: str, evidence: Sequence[Evidence], *, required: bool = False) -> CitationReport:
    """Every marker's status, and (with `required`) the sentences that cite nothing."""
    if len(answer) > MAX_ANSWER_CHARS:
        raise LimitExceeded(f"answer is {len(answer)} characters; at most {MAX_ANSWER_CHARS} are checked")
    if len(evidence) > MAX_EVIDENCE:
        raise LimitExceeded(f"{len(evidence)} evidence items; at most {MAX_EVIDENCE}")
    chunks: dict[tuple[str, str], list[str]] = {}
    for item in evidence:
        chunks.setdefault((item.source_id, item.chunk_id), []).append(normalise(item.content))
    citations: list[Citation] = []
    uncited: list[Sentence] = []
    sentences = split_sentences(answer)
    for sentence in sentences:
        runs = _marker_runs(sentence.text)
        if not runs and required and _has_words(sentence.text):
            uncited.append(sentence)
        for start, markers in runs:
            quote = _quote_before(sentence.text[:start])
            cited = [chunks.get((source_id, chunk_id)) for _, source_id, chunk_id in markers]
            found = quote is None or any(normalise(quote) in text for texts in cited if texts for text in texts)
            for (marker, source_id, chunk_id), texts in zip(markers, cited):
                status = (CitationStatus.UNKNOWN if texts is None
                          else CitationStatus.VALID if found else CitationStatus.MISQUOTED)
                citations.append(Citation(marker, source_id, chunk_id, status, sentence.index, quote))
    return CitationReport(tuple(citations), tuple(uncited), tuple(sentences))


Marker = tuple[str, str, str]  # (marker text, source id, chunk id)


def cited(answer: str) -> list[tuple[str, str]]:
    """(source id, chunk id) of every marker in `answer`, in the order written."""
    if len(answer) > MAX_ANSWER_CHARS:
        raise LimitExceeded(f"answer is {len(answer)} characters; at most {MAX_ANSWER_CHARS} are checked")
    return [(source_id, chunk_id) for _, markers in _marker_runs(answer) for _, source_id, chunk_id in markers]


def format_marker(source_id: str, chunk_id: str) -> str:
    r"""The marker that cites a chunk, ``[billing/refunds.md/0]``; ``[``, ``]`` and ``\`` in an id get
    a backslash before them: ``[faq\[v2\].md/0]`` cites source ``faq[v2].md``, chunk ``0``."""
    return f"[{_escape(source_id)}/{_escape(chunk_id)}]"


def _escape(identifier: str) -> str:
    return _TO_ESCAPE.sub(r"\\\1", identifier)


def parse_marker(text: str) -> tuple[str, str] | None:
    """(source id, chunk id) of one marker as `format_marker` writes it; None if `text` is not one."""
    match = BRACKETED.fullmatch(text)
    return None if match is None else _ids(match.group(1))


def _ids(inside: str) -> tuple[str, str] | None:
    source_id, slash, chunk_id = inside.rpartition("/")
    if not slash or not source_id or not chunk_id:
        return None
    return _ESCAPED.sub(r"\1", source_id), _ESCAPED.sub(r"\1", chunk_id)


def _marker_runs(text: str) -> list[tuple[int, list[Marker]]]:
    """Markers grouped into runs (separated by whitespace only), each with the offset it starts at."""
    runs: list[tuple[int, list[Marker]]] = []
    last_end = -1
    for match in BRACKETED.finditer(text):
        ids = _ids(match.group(1))
        if ids is None:
            continue
        marker = (match.group(), *ids)
        if runs and not text[last_end:match.start()].strip():
            runs[-1][1].append(marker)
        else:
            runs.append((match.start(), [marker]))
        last_end = match.end()
    return runs


def split_sentences(text: str) -> list[Sentence]:
    """Sentences at . ! ? followed by space (never inside a quoted span), and at line breaks; markers
    stay with their sentence."""
    quoted = [(m.start(), m.end()) for m in _QUOTED.finditer(text)]
    starts = [lo for lo, _ in quoted]
    parts: list[str] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        # A stop inside a quote belongs to it; one right before the closing mark ends the sentence.
        # The spans do not overlap, so only the last one opening before the stop can hold it.
        nearest = bisect.bisect_left(starts, end.start()) - 1
        if nearest >= 0 and end.end() < quoted[nearest][1]:
            continue
        # Closing marks after the stop stay with the sentence they close.
        parts.append(text[start:end.start() + len(end.group().rstrip())].strip())
        start = end.end()
    parts.append(text[start:].strip())
    merged: list[str] = []
    for part in parts:
        if not part:
            continue
        # A run of markers after the full stop ("... days. [a/0]") belongs to the sentence before.
        if merged and _only_markers(part):
            merged[-1] = f"{merged[-1]} {part}"
        else:
            merged.append(part)
    return [Sentence(index, value) for index, value in enumerate(merged)]


def _only_markers(text: str) -> bool:
    return not BRACKETED.sub("", text).strip() and bool(_marker_runs(text))


def _quote_before(prefix: str) -> str | None:
    match = _QUOTE_BEFORE.search(prefix)
    if match is None:
        return None
    return next(group for group in match.groups() if group is not None)


def _has_words(text: str) -> bool:
    """Headings, bullets and lone symbols are not claims."""
    stripped = text.strip()
    return not stripped.startswith("#") and sum(ch.isalnum() for ch in stripped) >= 3
