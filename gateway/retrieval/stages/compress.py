"""compress: extractive only — each hit keeps its own sentences most relevant to the question.

`sentences` is model-free: sentences are scored by the question's stemmed terms they contain,
weighted by inverse sentence frequency across the hits (a small BM25-like weight), and kept in
their original order up to `maxCharsPerHit`. `llm` asks the tenant's language model which
sentence numbers to keep; the text itself always comes from the hit, never from the model.
The length before compression is recorded in `provenance.original_chars`.

A hit has no excerpt to keep when none of its sentences shares a stemmed term with the question
(`sentences`; any hit, long or short), or when the model keeps none of a cut hit's sentences
(`llm`). `unmatched: keep` (the default) keeps its opening sentences; `unmatched: drop` drops it,
and the stage's trace counts the dropped hits and names up to five. A question without a single
indexable term (only stop words) matches nothing, so then nothing is dropped and the trace says why.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from dataclasses import replace

from gateway.admission.scheduler import offload
from gateway.errors import UpstreamUnavailable
from gateway.retrieval.hit import Hit
from gateway.retrieval.llm import ChatClient
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.storage.analyzer import Analyzer, analyzer_for
from gateway.tenancy.pipelines import CompressParams, OnError

# A sentence ends at . ! ? (optionally closed by a quote or bracket) followed by space, or at a
# blank line; abbreviations may split early, which only costs a little context.
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n\s*\n")

LLM_PROMPT = (
    "You select evidence. Below are numbered sentences from one document. List the numbers of the "
    "sentences needed to answer the question, most important first. Answer with JSON only: "
    '{"keep": [1, 3]}')


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(text) if s and s.strip()]


def select(sentences: Sequence[str], ranked: Sequence[int], max_chars: int) -> str:
    """The ranked sentences that fit in `max_chars`, joined in their original order."""
    kept: list[int] = []
    used = 0
    for index in ranked:
        size = len(sentences[index]) + (1 if kept else 0)
        if used + size <= max_chars:
            kept.append(index)
            used += size
    if not kept and ranked:
        return sentences[ranked[0]][:max_chars]
    return " ".join(sentences[i] for i in sorted(kept))


class Compress:
    name = "compress"
    depth = 0

    def __init__(self, params: CompressParams, analyzer: Analyzer, llm: ChatClient | None = None) -> None:
        self.on_error: OnError = params.on_error
        self._params = params
        self._analyzer = analyzer
        self._llm = llm

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        limit = self._params.max_chars_per_hit
        split = [split_sentences(h.content) for h in hits]
        drop = self._params.unmatched == "drop"
        if self._params.method == "llm":
            # Only hits that will be cut are worth a language-model call.
            async def ranking(hit: Hit, sentences: list[str]) -> tuple[list[int], bool]:
                if len(hit.content) <= limit or not sentences:
                    return [], True
                kept = await self._llm_ranking(request.question, sentences)
                return kept or [0], bool(kept)

            found = list(await asyncio.gather(*(ranking(h, s) for h, s in zip(hits, split))))
        else:
            # Stemming every sentence of up to a thousand hits is CPU work: off the event loop.
            analyzers = [self._analyzer_of(request, hit) for hit in hits]
            found = await offload(self._lexical_rankings, request.question, split, analyzers)
            asked = {id(a): a for a in analyzers or [self._analyzer]}.values()
            if drop and not any(a.terms(request.question) for a in asked):
                drop = False
                handle.warn("unmatched: drop dropped nothing: the question has no indexable terms (only stop "
                            "words), so no sentence can match it")
        out = []
        dropped: list[str] = []
        before = after = 0
        for hit, sentences, (ranked, matched) in zip(hits, split, found):
            before += len(hit.content)
            if drop and not matched:
                dropped.append(hit.id)
                continue
            if len(hit.content) <= limit or not sentences:
                out.append(hit)
                after += len(hit.content)
                continue
            content = select(sentences, ranked, limit)
            after += len(content)
            original = hit.provenance.original_chars or len(hit.content)
            out.append(replace(hit, content=content,
                               provenance=replace(hit.provenance, original_chars=original)))
        handle.detail.update({"method": self._params.method, "chars_before": before, "chars_after": after,
                              "dropped": len(dropped)})
        if dropped:
            handle.warn(f"compress dropped {len(dropped)} hit(s) with no excerpt matching the question "
                        f"(unmatched: drop): {', '.join(dropped[:5])}")
        return out

    def _analyzer_of(self, request: StageRequest, hit: Hit) -> Analyzer:
        """The hit's collection's language's analyzer; the stage's own for a collection not targeted."""
        language = request.languages.get((hit.namespace, hit.collection))
        return self._analyzer if language is None else analyzer_for(language)

    def _lexical_rankings(self, question: str, split: list[list[str]],
                          analyzers: list[Analyzer]) -> list[tuple[list[int], bool]]:
        """Each hit's sentence numbers, best first, and whether any sentence shares a term with the
        question (both in the hit's collection's language)."""
        asked = {id(a): set(a.terms(question)) for a in analyzers}
        bags = [[set(a.terms(s)) for s in sentences] for a, sentences in zip(analyzers, split)]
        total = sum(len(b) for b in bags) or 1
        terms = set().union(*asked.values())
        frequency = {t: sum(t in bag for doc in bags for bag in doc) for t in terms}
        weight = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}
        rankings = []
        for analyzer, doc in zip(analyzers, bags):
            own = asked[id(analyzer)]
            scores = [sum(weight[t] for t in own & bag) for bag in doc]
            # Ties keep document order, so an uninformative question keeps the opening.
            rankings.append((sorted(range(len(doc)), key=lambda i: (-scores[i], i)), any(own & bag for bag in doc)))
        return rankings

    async def _llm_ranking(self, question: str, sentences: list[str]) -> list[int]:
        assert self._llm is not None
        numbered = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(sentences))
        data = await self._llm.complete_json(LLM_PROMPT, f"Question: {question}\n\nSentences:\n{numbered}")
        keep = data.get("keep")
        if not isinstance(keep, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in keep):
            raise UpstreamUnavailable(f"language model {self._llm.model!r} answered without a 'keep' list of numbers")
        # Empty when the model kept none of the sentences: the hit has no excerpt (`unmatched`).
        return list(dict.fromkeys(k - 1 for k in keep if 1 <= k <= len(sentences)))
