"""Sorting a search's ranked hits by a stored property, relevance breaking ties.

A sort reorders the hits the search ranked (its `limit` best, after every pipeline stage and
autocut): "the newest of the 50 best matches", not "the newest chunks of the collection". A
dense search matches every row, so ordering the whole collection by date would drop relevance
altogether; raising `limit` (up to GATEWAY_MAX_LIMIT) sorts more of the result.

The order is total and deterministic: keys in the order given, each ascending or descending;
a hit without a value for a key (or with a list or object there) comes after every hit with
one, in both directions; numbers come before strings ascending (after them descending),
strings compare by Unicode code point, booleans as 0 and 1; equal keys keep the ranked order (score, then the retrieval's own tie-break). Pages are cut from this
one list, so they neither repeat nor skip hits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from gateway.errors import InvalidInput, allowed
from gateway.retrieval.hit import Hit
from gateway.retrieval.properties import metadata_key, read
from gateway.storage.filters import shown

# Enough for "by status, then newest"; each key is one more pass over at most GATEWAY_MAX_LIMIT hits.
MAX_SORT_KEYS = 3


class SortOrder(StrEnum):
    ASC = "asc"
    DESC = "desc"


# Sortable properties besides metadata.<key>, and the stored chunk field each reads.
SORT_FIELDS: Mapping[str, str] = {
    "created_at": "created_at", "updated_at": "updated_at", "title": "title", "source_id": "source_id",
    "source_path": "source_path", "source_url": "source_url", "page": "metadata",
}


@dataclass(frozen=True, slots=True)
class SortKey:
    """One sort key: a property (`created_at`, `metadata.year`, ...) and its order."""

    field: str
    order: SortOrder = SortOrder.ASC


def check_sort(keys: Sequence[SortKey]) -> tuple[SortKey, ...]:
    """The keys, refused when too many, repeated, or not a sortable property (at the boundary;
    whether a metadata key is declared is `check_declared`'s, once the collections are known)."""
    if len(keys) > MAX_SORT_KEYS:
        raise InvalidInput(f"sort has {len(keys)} keys; allowed: at most {MAX_SORT_KEYS}")
    seen: set[str] = set()
    for key in keys:
        if key.field in seen:
            raise InvalidInput(f"sort names {shown(key.field)} twice; each property may appear once")
        seen.add(key.field)
        if key.field not in SORT_FIELDS and metadata_key(key.field) is None:
            raise InvalidInput(f"sort field {shown(key.field)} is unknown; allowed: "
                               f"{allowed(SORT_FIELDS)}, or metadata.<key> for a key the collection declares")
    return tuple(keys)


def sort_stored_fields(keys: Sequence[SortKey]) -> frozenset[str]:
    """The stored chunk fields the keys read (a search that fetches only some must fetch these)."""
    return frozenset(SORT_FIELDS.get(k.field, "metadata") for k in keys)


def sort_hits(hits: Sequence[Hit], keys: Sequence[SortKey]) -> tuple[Hit, ...]:
    """The hits in key order, ties in their given (ranked) order; a new tuple, hits unchanged."""
    ordered = list(hits)
    # Least significant key first: each pass is a stable sort, so earlier keys decide and the
    # ranked order breaks the remaining ties.
    for key in reversed(keys):
        valued = [(sort_value(h, key.field), h) for h in ordered]
        present = [pair for pair in valued if pair[0] is not None]
        present.sort(key=lambda pair: pair[0], reverse=key.order is SortOrder.DESC)  # type: ignore[arg-type,return-value]
        ordered = [h for _, h in present] + [h for value, h in valued if value is None]
    return tuple(ordered)


def sort_value(hit: Hit, field: str) -> tuple[int, Any] | None:
    """A comparable (kind, value) for the hit's property; None when it has none.

    Kinds keep a number from ever being compared with a string: numbers (0) before strings (1)."""
    value = read(hit, field)
    if isinstance(value, datetime):
        return (0, value.timestamp())
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, (int, float)):
        return (0, value) if value == value else None  # NaN has no place in an order
    if isinstance(value, str) and value:
        return (1, value)
    return None

