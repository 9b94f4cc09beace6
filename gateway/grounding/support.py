"""Support check: does the chunk a citation names back the sentence that cites it?

The bundled cross-encoder (gateway/retrieval/stages/cross_encoder.py, ms-marco MiniLM) reads
(cited sentence without its markers, cited chunk's content) and gives a logit; two thresholds
turn it into SUPPORTED (score >= supported_at), WEAK (weak_at <= score < supported_at) or
UNSUPPORTED (score < weak_at). The model was trained for search relevance, not entailment: it
tells a sentence the chunk does not talk about from one it does, but a sentence that contradicts
its chunk on the chunk's own topic can still score as supported (benchmarks/citation_support.py
measures both kinds).

Work is bounded: at most `max_checks` (sentence, chunk) pairs are scored per answer, in the order
written; citations past the bound, unknown and misquoted ones keep `support` None, and the report
counts the ones left unchecked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.admission.scheduler import offload
from gateway.grounding.citations import (
    BRACKETED,
    CitationReport,
    CitationStatus,
    Evidence,
    SupportCheck,
    SupportThresholds,
    SupportVerdict,
)

# About 75 ms of one core per pair at 256 tokens; a sentence and an 800-character chunk fit.
MAX_TOKENS = 256
# 16 pairs are about 1.2 s of one core: the most one validateCitations call may spend on the model.
MAX_CHECKS = 16
# Chosen by 5-fold cross-validation on the tune split of benchmarks/data/citation_support.jsonl
# (`python benchmarks/citation_support.py`); the figures it reports are on the test split.
THRESHOLDS = SupportThresholds(supported_at=3.55, weak_at=-1.62)

_SPACE = re.compile(r"\s+")


class PairScorer(Protocol):
    """What the check needs of a cross-encoder: one score per passage for one query."""

    def score(self, query: str, passages: Sequence[str], max_tokens: int) -> list[float]: ...


def verdict(score: float, thresholds: SupportThresholds = THRESHOLDS) -> SupportVerdict:
    if score >= thresholds.supported_at:
        return SupportVerdict.SUPPORTED
    return SupportVerdict.WEAK if score >= thresholds.weak_at else SupportVerdict.UNSUPPORTED


def claim(sentence: str) -> str:
    """The sentence as the model reads it: markers removed, whitespace collapsed."""
    return _SPACE.sub(" ", BRACKETED.sub(" ", sentence)).strip()


def check_support(report: CitationReport, evidence: Sequence[Evidence], scorer: PairScorer, *,
                  max_checks: int = MAX_CHECKS, thresholds: SupportThresholds = THRESHOLDS) -> CitationReport:
    """`report` with each VALID citation's support filled in (up to `max_checks` pairs)."""
    contents: dict[tuple[str, str], str] = {}
    for item in evidence:
        contents.setdefault((item.source_id, item.chunk_id), item.content)
    texts = {s.index: claim(s.text) for s in report.sentences}
    wanted: list[tuple[int, tuple[str, str]]] = []
    unchecked = 0
    for citation in report.citations:
        if citation.status is not CitationStatus.VALID:
            continue
        pair = (citation.sentence, (citation.source_id, citation.chunk_id))
        if pair in wanted:
            continue
        if len(wanted) < max_checks:
            wanted.append(pair)
        else:
            unchecked += 1
    scores: dict[tuple[int, tuple[str, str]], float] = {}
    by_sentence: dict[int, list[tuple[str, str]]] = {}
    for index, key in wanted:
        by_sentence.setdefault(index, []).append(key)
    for index, keys in by_sentence.items():
        for key, score in zip(keys, scorer.score(texts[index], [contents[k] for k in keys], MAX_TOKENS)):
            scores[(index, key)] = score
    checked = []
    for citation in report.citations:
        score = scores.get((citation.sentence, (citation.source_id, citation.chunk_id)))
        check = None if score is None else SupportCheck(verdict(score, thresholds), score, thresholds)
        checked.append(dataclasses.replace(citation, support=check))
    return dataclasses.replace(report, citations=tuple(checked), unchecked=unchecked)


async def check_support_bundled(report: CitationReport, evidence: Sequence[Evidence]) -> CitationReport:
    """`check_support` with the bundled cross-encoder, off the event loop on the request's lane."""
    return await offload(_bundled, report, evidence)


def _bundled(report: CitationReport, evidence: Sequence[Evidence]) -> CitationReport:
    from gateway.retrieval.stages.cross_encoder import shared_model  # loads onnxruntime on first use

    return check_support(report, evidence, shared_model())
