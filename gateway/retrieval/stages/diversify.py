"""diversify: maximal marginal relevance over token shingles (Carbonell & Goldstein, 1998).

Each step picks the hit maximising `lambda * relevance - (1 - lambda) * max_sim - penalty`,
where relevance is the min-max normalised score, max_sim the highest Jaccard similarity of
its word shingles to a hit already picked, and penalty `sourcePenalty` when a hit of the same
source was already picked. Model-free, so it needs no vectors.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.admission.deadline import check_deadline
from gateway.admission.scheduler import offload
from gateway.retrieval.hit import Hit, with_signal
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import DiversifyParams, OnError

_WORD = re.compile(r"[^\W_]+")


def shingles(text: str, size: int) -> frozenset[tuple[str, ...]]:
    words = _WORD.findall(text.casefold())
    if len(words) < size:
        return frozenset({tuple(words)}) if words else frozenset()
    return frozenset(tuple(words[i:i + size]) for i in range(len(words) - size + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def mmr(hits: Sequence[Hit], lambda_: float, limit: int, shingle: int = 3,
        source_penalty: float = 0.0) -> list[Hit]:
    """The MMR order of `hits` (at most `limit`); each hit's score becomes its MMR value."""
    if not hits:
        return []
    scores = [h.score for h in hits]
    lo, hi = min(scores), max(scores)
    relevance = [(s - lo) / (hi - lo) if hi > lo else 1.0 for s in scores]
    sets = [shingles(h.content, shingle) for h in hits]
    remaining = list(range(len(hits)))
    chosen: list[int] = []
    out: list[Hit] = []
    while remaining and len(out) < limit:
        check_deadline(f"diversify pick {len(out) + 1}")
        def value(i: int) -> float:
            similarity = max((jaccard(sets[i], sets[j]) for j in chosen), default=0.0)
            same_source = any(hits[j].source_id == hits[i].source_id for j in chosen)
            return lambda_ * relevance[i] - (1 - lambda_) * similarity - (source_penalty if same_source else 0.0)

        best = max(remaining, key=lambda i: (value(i), -i))
        # The MMR value replaces the score; the `diversify` signal keeps it with the pick's rank.
        out.append(with_signal(hits[best], "diversify", value(best), len(out) + 1, score=value(best)))
        chosen.append(best)
        remaining.remove(best)
    return out


class Diversify:
    name = "diversify"

    def __init__(self, params: DiversifyParams) -> None:
        self.on_error: OnError = params.on_error
        self._params = params
        # MMR can only choose among what it is given: ask retrieval for three picks per slot.
        self.depth = 3 * (params.limit or 10)

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        p = self._params
        limit = p.limit or request.limit
        # Quadratic in the picks and pure Python (~1.8 s for 100 picks of 300): never on the event loop.
        out = await offload(mmr, hits, p.lambda_, limit, p.shingle, p.source_penalty)
        handle.detail.update({"lambda": p.lambda_, "source_penalty": p.source_penalty,
                              "sources": len({h.source_id for h in out}), "dropped": len(hits) - len(out)})
        return out
