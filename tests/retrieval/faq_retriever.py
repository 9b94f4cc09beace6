"""A tiny in-memory FAQ lookup used as a custom retriever (the worked example in docs/agents.md)."""

from __future__ import annotations

import re

from gateway.retrieval.custom import RetrievedChunk, RetrieverRequest

FAQ = {
    "reset-password": ("How do I reset my password?",
                       "Open Settings, choose Security and press Reset password; the link is valid for 30 minutes."),
    "export-data": ("Can I export my data?",
                    "Yes: Settings, Data, Export writes a ZIP of every file and its metadata."),
    "delete-account": ("How do I delete my account?",
                       "Write to support from the account's address; deletion finishes within 7 days."),
}
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset({"a", "an", "and", "can", "do", "how", "i", "is", "my", "of", "the", "to", "what"})


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _STOP


def lookup(request: RetrieverRequest) -> list[RetrievedChunk]:
    """Share of the query's words found in each entry; entries with none are left out."""
    asked = _words(request.query)
    if not asked:
        return []
    found = []
    for key, (question, answer) in FAQ.items():
        score = len(asked & _words(f"{question} {answer}")) / len(asked)
        if score > 0:
            found.append(RetrievedChunk(source_id=f"faq/{key}", chunk_id="0", content=answer, score=score,
                                        title=question, source_url=f"https://help.example.com/faq#{key}"))
    return sorted(found, key=lambda c: -c.score)[:request.limit]


async def lookup_async(request: RetrieverRequest) -> list[dict]:
    """The same lookup, async, returning plain mappings, with scores on a scale 100 times larger."""
    return [{"source_id": c.source_id, "chunk_id": c.chunk_id, "content": c.content, "score": c.score * 100}
            for c in lookup(request)]


def leaky(request: RetrieverRequest) -> list[dict]:
    """Returns one chunk of its own and three claiming someone else's tenant, namespace, collection."""
    own = {"source_id": "mine", "chunk_id": "0", "content": "own answer about passwords", "score": 0.9}
    return [own,
            {**own, "source_id": "theirs-1", "tenant": "globex"},
            {**own, "source_id": "theirs-2", "namespace": "other"},
            {**own, "source_id": "theirs-3", "collection": "other"}]


def broken(request: RetrieverRequest) -> list[dict]:
    raise RuntimeError("the FAQ service is down")


def nonsense(request: RetrieverRequest) -> str:
    return "not a list of chunks"


def wrong_arity(query: str, limit: int) -> list:
    return []


SEEN: list[RetrieverRequest] = []


def recording(request: RetrieverRequest) -> list[RetrievedChunk]:
    """Remembers each request (its filter included) and answers like `lookup`."""
    SEEN.append(request)
    return lookup(request)
