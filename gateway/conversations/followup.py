"""Follow-up resolution: does a query lean on the conversation, and what should be searched instead.

Rules (no model): a query is a follow-up when it uses an anaphoric word ("it", "that", "they",
...) or has at most `short_query_words` content words ("pricing?", "and for EU?"). A follow-up
is searched as the anchor turn's query followed by its own words, where the anchor is the most
recent turn that stood alone (so "tell me more about it", then "who wrote that?" both lean on
the original question), and the previous turn's top sources are boosted. With
`resolve: llm`, the tenant's language model rewrites the query into a standalone one instead.

Pure functions over turns and hits; the service (`gateway/conversations/service.py`) does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from gateway.conversations.turns import Turn
from gateway.errors import UpstreamUnavailable
from gateway.retrieval.hit import Hit, SignalScore
from gateway.retrieval.llm import ChatClient
from gateway.storage.analyzer import STOP_WORDS

# Words that point back at something said before. "this"/"that" also open standalone questions
# ("what is this error"), which then merely carry the prior topic along: cheap when wrong.
ANAPHORS: frozenset[str] = frozenset(
    "it its itself that this these those they them their theirs he him his she her hers there "
    "one ones former latter same".split())
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class Method(StrEnum):
    NONE = "none"    # no history, or the query stands alone
    RULES = "rules"
    LLM = "llm"


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a conversation turn searched, and why."""

    query: str                 # what the turn asked
    searched: str              # what was searched
    method: Method
    reason: str = ""
    from_turn: int = 0         # the turn whose query resolved this one (0: none)
    boost_turn: int = 0        # the turn whose sources are boosted (0: none)
    boost_sources: tuple[str, ...] = ()
    # Also searched, and fused with `searched` (RRF): the query's own words, when only its
    # shortness made it a follow-up (it may open a new topic).
    alongside: str | None = None

    @property
    def resolved(self) -> bool:
        return self.method is not Method.NONE


def detect(query: str, short_query_words: int) -> str | None:
    """Why `query` reads as a follow-up, or None when it stands alone."""
    words = [w.lower() for w in _WORD.findall(query)]
    anaphors = [w for w in words if w in ANAPHORS]
    if anaphors:
        return f"anaphoric word {anaphors[0]!r}"
    content = [w for w in words if w not in STOP_WORDS]
    if len(content) <= short_query_words:
        return f"short query ({len(content)} content word{'s' if len(content) != 1 else ''})"
    return None


def anchor(turns: Sequence[Turn]) -> Turn | None:
    """The most recent turn that stood alone (else the oldest one held)."""
    for turn in reversed(turns):
        if not turn.resolved_from:
            return turn
    return turns[0] if turns else None


def resolve_rules(query: str, turns: Sequence[Turn], short_query_words: int, boost_sources: int,
                  max_chars: int) -> Resolution:
    if not turns:
        return Resolution(query, query, Method.NONE, "no earlier turn")
    reason = detect(query, short_query_words)
    if reason is None:
        return Resolution(query, query, Method.NONE, "stands alone")
    base = anchor(turns)
    assert base is not None
    searched = f"{base.query} {query}"
    if len(searched) > max_chars:
        searched = f"{base.query[:max(0, max_chars - len(query) - 1)]} {query}"
    previous = turns[-1]
    return Resolution(query, searched, Method.RULES, reason, from_turn=base.turn, boost_turn=previous.turn,
                      boost_sources=previous.sources[:boost_sources],
                      alongside=query if reason.startswith("short query") else None)


_SYSTEM = ("You rewrite the last message of a search conversation into one standalone search query. "
           "Replace pronouns and references with what they refer to in the earlier messages. If the last "
           "message already stands alone, return it unchanged. Answer only JSON: "
           '{"query": "<standalone query>", "followUp": true|false}')


async def resolve_llm(client: ChatClient, query: str, turns: Sequence[Turn], boost_sources: int,
                      max_chars: int) -> Resolution:
    """The model's standalone rewrite; raises UpstreamUnavailable (the caller falls back to rules)."""
    if not turns:
        return Resolution(query, query, Method.NONE, "no earlier turn")
    history = "\n".join(f"{t.turn}. {t.query}" for t in turns[-3:])
    answer = await client.complete_json(_SYSTEM, f"Earlier messages:\n{history}\nLast message: {query}")
    rewritten = answer.get("query")
    follow_up = answer.get("followUp", True)
    if not isinstance(rewritten, str) or not rewritten.strip():
        raise UpstreamUnavailable(f"language model {client.model!r} answered without a 'query' string")
    rewritten = rewritten.strip()[:max_chars]
    if follow_up is False or rewritten == query:
        return Resolution(query, rewritten, Method.NONE, "stands alone (language model)")
    previous = turns[-1]
    return Resolution(query, rewritten, Method.LLM, "rewritten by the language model",
                      from_turn=previous.turn, boost_turn=previous.turn,
                      boost_sources=previous.sources[:boost_sources])


def boost(hits: Sequence[Hit], sources: Sequence[str], factor: float) -> tuple[list[Hit], list[str]]:
    """Hits from `sources` (namespace/collection/sourceId) scored `score * (1 + factor)`, re-sorted.

    Returns the new ranking and the qualified ids that were boosted; the boost is recorded as a
    `followUp:boost` signal in each boosted hit's provenance.
    """
    wanted = set(sources)
    out, boosted = [], []
    for rank, hit in enumerate(hits, start=1):
        if f"{hit.namespace}/{hit.collection}/{hit.source_id}" in wanted and factor > 0:
            # raw: the multiplier; rank: the hit's rank before the boost.
            scores = hit.provenance.scores + (SignalScore("followUp:boost", 1.0 + factor, rank),)
            out.append(replace(hit, score=hit.score * (1.0 + factor),
                               provenance=replace(hit.provenance, scores=scores)))
            boosted.append(hit.qualified_id)
        else:
            out.append(hit)
    out.sort(key=lambda h: (-h.score, h.qualified_id))
    return out, boosted
