"""Highlights: why a hit matched, as spans of the content the search returned.

Term spans: every word of the content whose BM25 terms include a term of the query, found by
the same analysis as BM25 for the hit's collection (gateway/storage/analyzer.py: lowercase,
stop words, Snowball stems), so `refunds` in the content marks a query's `refunded`. Offsets are into the returned content
(after any compress stage cut it), counted in Unicode code points (Python's and JavaScript's
`Array.from(text)` indexing; a UTF-16 client converts astral characters itself).

Best sentence: a hit with no term span (found by its embedding only, or by its title) gets the
sentence of its content most similar to the query, by cosine of the bundled embedder's vectors
(the model that ranked it, so the sentence is the one that most likely made it match). The cost
is bounded: at most MAX_SENTENCES sentences a hit, each cut to SENTENCE_CHARS characters, embedded
in one batch per page; term spans need no model. Without a text embedder there is no sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from gateway.retrieval.hit import Hit
from gateway.retrieval.stages.compress import SENTENCE_END
from gateway.storage.analyzer import Analyzer

# The analyzer's tokens (storage/analyzer.py), matched on the original text so offsets stay
# exact where lowercasing changes a length ('İ' is two code points lowercased);
# tests/retrieval/test_highlights.py checks that both find the same terms.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# A page of 100 hits marks at most 100 words each; a 64 KiB chunk can hold thousands.
MAX_SPANS = 100
# Sentences embedded per hit, and their length: about 64 of MiniLM's tokens each, so a hit costs
# at most eight short forward passes (docs/operations.md, the cost model).
MAX_SENTENCES = 8
SENTENCE_CHARS = 300


@dataclass(frozen=True, slots=True)
class Span:
    """content[start:end] (code points) is a word matching the query's BM25 `term`."""

    start: int
    end: int
    term: str


@dataclass(frozen=True, slots=True)
class Sentence:
    """content[start:end] is the sentence most similar to the query, with its cosine `score`."""

    start: int
    end: int
    score: float


@dataclass(frozen=True, slots=True)
class Highlights:
    spans: tuple[Span, ...] = ()
    sentence: Sentence | None = None
    # More words matched than MAX_SPANS: the spans are the first ones.
    truncated: bool = False


def term_spans(content: str, terms: Collection[str], analyzer: Analyzer) -> tuple[tuple[Span, ...], bool]:
    """The words of `content` whose analysed terms include one of `terms`, in order, at most
    MAX_SPANS (and whether there were more)."""
    if not terms:
        return (), False
    spans: list[Span] = []
    for word in _WORD.finditer(content):
        matched = next((t for t in analyzer.terms(word.group()) if t in terms), None)
        if matched is None:
            continue
        if len(spans) == MAX_SPANS:
            return tuple(spans), True
        spans.append(Span(word.start(), word.end(), matched))
    return tuple(spans), False


def sentence_spans(content: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence, surrounding whitespace excluded."""
    out, start = [], 0
    # Where the compress stage splits: closing quotes or brackets after the stop stay with the sentence.
    bounds = [(m.start() + len(m.group().rstrip()), m.end())
              for m in SENTENCE_END.finditer(content)] + [(len(content), len(content))]
    for end, following in bounds:
        piece = content[start:end]
        stripped = piece.strip()
        if stripped:
            left = start + len(piece) - len(piece.lstrip())
            out.append((left, left + len(stripped)))
        start = following
    return out


def highlight(hits: Sequence[Hit], query: str, analyzer_of: Callable[[Hit], Analyzer],
              similarity: Callable[[list[str]], np.ndarray] | None) -> list[Highlights]:
    """Each hit's highlights. `analyzer_of(hit)` is the BM25 analysis of the hit's collection (the
    query is analysed by it too). `similarity(sentences)` gives each sentence's cosine with the
    query (None: no text embedder, so no best sentence); it is called once, for every hit without
    a term span together."""
    asked: dict[int, frozenset[str]] = {}
    found = []
    for hit in hits:
        analyzer = analyzer_of(hit)
        terms = asked.setdefault(id(analyzer), frozenset(analyzer.terms(query)))
        found.append(term_spans(hit.content, terms, analyzer))
    wanted: list[tuple[int, list[tuple[int, int]]]] = []
    if similarity is not None:
        for index, (hit, (spans, _)) in enumerate(zip(hits, found)):
            if not spans and hit.modality == "text":
                sentences = sentence_spans(hit.content)[:MAX_SENTENCES]
                if sentences:
                    wanted.append((index, sentences))
    best: dict[int, Sentence] = {}
    texts = [hits[i].content[a:b][:SENTENCE_CHARS] for i, sentences in wanted for a, b in sentences]
    if texts:
        scores = similarity(texts)
        at = 0
        for index, sentences in wanted:
            own = scores[at:at + len(sentences)]
            top = int(np.argmax(own))  # the first of equal scores: the earlier sentence
            best[index] = Sentence(sentences[top][0], sentences[top][1], float(own[top]))
            at += len(sentences)
    return [Highlights(spans, best.get(i), truncated) for i, (spans, truncated) in enumerate(found)]
