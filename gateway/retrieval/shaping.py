"""Result shaping after ranking: autocut (cut the tail at a score jump), sort by a stored
property (retrieval/sorting.py) and grouping by source.

All are pure functions over the final ranked hits, applied once, after every pipeline stage,
so a page, a group and a context block all read the same list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gateway.retrieval.hit import Hit
from gateway.retrieval.sorting import SortKey, sort_hits

# Enough for "the first few natural clusters"; past this the curve has no usable jumps left.
MAX_AUTOCUT = 10
# Hits kept per group when a request groups without saying how many.
DEFAULT_HITS_PER_GROUP = 3


class GroupBy(StrEnum):
    """What a search's hits may be grouped by."""

    SOURCE = "source"


@dataclass(frozen=True, slots=True)
class Shaping:
    """How the ranked hits are shaped; validated where the request is built."""

    autocut: int | None = None
    group_by: GroupBy | None = None
    hits_per_group: int = DEFAULT_HITS_PER_GROUP
    # Reorder by stored properties, relevance breaking ties; after autocut (which reads the score
    # curve), before grouping (groups then follow their first hit in this order).
    sort: tuple[SortKey, ...] = ()


@dataclass(frozen=True, slots=True)
class Group:
    """The hits of one source, best first; ranked by its best hit."""

    namespace: str
    collection: str
    source_id: str
    hits: tuple[Hit, ...]

    @property
    def score(self) -> float:
        return self.hits[0].score


def autocut_count(scores: Sequence[float], jumps: int) -> int:
    """How many of the ranked `scores` to keep: all before the `jumps`-th large jump.

    Weaviate's autocut (entities/autocut): the scores are min-max normalised onto [0, 1] so the
    first is 0 and the last 1, and compared with the straight line from the first to the last
    result. A point that lies further above that line than both neighbours is where the curve
    bends after a jump; the cut keeps everything before the `jumps`-th such point. The
    normalisation makes it indifferent to the score direction and scale (cosine, BM25, RRF).
    """
    n = len(scores)
    if n <= 1 or scores[0] == scores[-1]:
        return n  # no spread, so no jump to cut at
    span = scores[-1] - scores[0]
    diff = [(s - scores[0]) / span - i / (n - 1) for i, s in enumerate(scores)]
    found = 0
    for i in range(1, n):
        # The last point has no right neighbour; Weaviate compares it with the two before it.
        neighbours = (diff[i - 1], diff[i + 1]) if i < n - 1 else (diff[i - 1], diff[max(i - 2, 0)])
        if diff[i] > max(neighbours):
            found += 1
            if found >= jumps:
                return i
    return n


def group_by_source(hits: Sequence[Hit], per_group: int) -> list[Group]:
    """Groups in the order of their best hit; each keeps its `per_group` best hits."""
    groups: dict[tuple[str, str, str], list[Hit]] = {}
    for hit in hits:
        members = groups.setdefault((hit.namespace, hit.collection, hit.source_id), [])
        if len(members) < per_group:
            members.append(hit)
    return [Group(namespace, collection, source_id, tuple(members))
            for (namespace, collection, source_id), members in groups.items()]


def shape(hits: Sequence[Hit], shaping: Shaping) -> tuple[tuple[Hit, ...], tuple[Group, ...] | None]:
    """(the hits, after autocut, sort and grouping; the groups, or None when not grouped)."""
    kept = tuple(hits)
    if shaping.autocut is not None:
        kept = kept[:autocut_count([h.score for h in kept], shaping.autocut)]
    if shaping.sort:
        kept = sort_hits(kept, shaping.sort)
    if shaping.group_by is None:
        return kept, None
    groups = tuple(group_by_source(kept, shaping.hits_per_group))
    return tuple(h for g in groups for h in g.hits), groups
