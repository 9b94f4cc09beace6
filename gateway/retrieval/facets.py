"""Facets: counts of a search's matches by a property, in a bounded number of buckets.

What is counted: the hits the same retrieval returns with its limit raised to the facet depth
(same collections, mode, fusion, filter and threshold; no pipeline stages, autocut or
grouping), so facets describe the filtered result set and not only the returned page. The
depth bounds the work: a dense search matches every row of a collection, so "every match" is
the collection, and only its best `depth` matches say anything about the query. When fewer
hits than the depth come back, every match was counted (`complete`), which is the usual case
for a BM25 search or a filter that narrows the result.

Counting is done in the gateway over those hits' stored fields (the search fetches only the
fields the facets read), never by an expression built from the request: the one expression
is the search's own filter, compiled by gateway/storage/filters.py.

Buckets: a value facet has one bucket per distinct value (a metadata list counts each of its
values once per hit), the largest first, ties by value; a range facet (`interval`, or a date
interval) has one bucket per non-empty range, in range order. Past `size` buckets, the
smallest are summed into `other`; hits without a value are `missing`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from gateway.errors import InvalidInput, allowed
from gateway.retrieval.hit import Hit
from gateway.retrieval.properties import metadata_key, read
from gateway.storage.filters import shown

# Buckets per facet and facets per search: a facet list, not a report.
MAX_BUCKETS = 100
DEFAULT_BUCKETS = 10
MAX_FACETS = 10
# Hits counted per search: at 1,000 a facet pass costs about what a hybrid search of limit 1,000 does.
MAX_FACET_DEPTH = 1000
DEFAULT_FACET_DEPTH = 200
# Page ranges when the request gives no interval: 1-10, 11-20, ...
DEFAULT_PAGE_INTERVAL = 10


class DateInterval(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    YEAR = "year"


# Facetable properties besides metadata.<key>, and the stored chunk fields each reads.
FACET_FIELDS: Mapping[str, tuple[str, ...]] = {
    "collection": (), "source_id": (), "modality": ("modality",), "title": ("title",), "page": ("metadata",),
    "created_at": ("created_at",), "updated_at": ("updated_at",),
}
_DATE_FIELDS = frozenset({"created_at", "updated_at"})
_VALUE_ONLY = frozenset({"collection", "source_id", "modality", "title"})


@dataclass(frozen=True, slots=True)
class FacetSpec:
    """One facet asked for: a property, the most buckets to return, and for ranges their width
    (`interval`, numbers and pages) or calendar unit (`date_interval`, dates)."""

    field: str
    size: int = DEFAULT_BUCKETS
    interval: float | None = None
    date_interval: DateInterval | None = None

    @property
    def ranged(self) -> bool:
        return self.interval is not None or self.date_interval is not None


@dataclass(frozen=True, slots=True)
class Bucket:
    """A value's (`value` set) or a range's (`start`, `end`: [start, end)) count of hits."""

    label: str
    count: int
    value: Any = None
    start: float | None = None
    end: float | None = None


@dataclass(frozen=True, slots=True)
class Facet:
    field: str
    buckets: tuple[Bucket, ...]
    other: int
    missing: int


@dataclass(frozen=True, slots=True)
class FacetCounts:
    """The facets of one search: `counted` hits at most `depth` per search; `complete` when fewer
    came back, so every match was counted."""

    depth: int
    counted: int
    facets: tuple[Facet, ...]

    @property
    def complete(self) -> bool:
        return self.counted < self.depth


def check_facets(specs: Sequence[FacetSpec], depth: int | None) -> tuple[tuple[FacetSpec, ...], int]:
    """The facets with their defaults filled in, and the depth; refused when a property is unknown,
    a size or interval is out of range or does not fit the property (at the boundary)."""
    if len(specs) > MAX_FACETS:
        raise InvalidInput(f"facets has {len(specs)} entries; allowed: at most {MAX_FACETS}")
    chosen = DEFAULT_FACET_DEPTH if depth is None else depth
    if not 1 <= chosen <= MAX_FACET_DEPTH:
        raise InvalidInput(f"facetDepth {chosen} is out of range; allowed: 1 to {MAX_FACET_DEPTH}")
    checked, seen = [], set()
    for spec in specs:
        name = spec.field
        if name not in FACET_FIELDS and metadata_key(name) is None:
            raise InvalidInput(f"facet field {shown(name)} is unknown; allowed: {allowed(FACET_FIELDS)}, or "
                               "metadata.<key> for a key the collection declares")
        if not 1 <= spec.size <= MAX_BUCKETS:
            raise InvalidInput(f"facet {name!r} asks for {spec.size} buckets; allowed: 1 to {MAX_BUCKETS}")
        if spec.interval is not None and spec.date_interval is not None:
            raise InvalidInput(f"facet {name!r} has interval and dateInterval; give one: interval for numbers "
                               "and pages, dateInterval for dates")
        if spec.interval is not None and not (math.isfinite(spec.interval) and spec.interval > 0):
            raise InvalidInput(f"facet {name!r} interval {spec.interval!r} is not a positive finite number")
        if name in _VALUE_ONLY and spec.ranged:
            raise InvalidInput(f"facet {name!r} counts values and takes no interval or dateInterval; ranges are for "
                               f"page, created_at, updated_at and metadata.<key>")
        if name in _DATE_FIELDS and spec.interval is not None:
            raise InvalidInput(f"facet {name!r} is a date: give dateInterval ({allowed(d.name for d in DateInterval)}), "
                               "not interval")
        if name == "page" and (spec.date_interval is not None or (spec.interval or 1) % 1):
            raise InvalidInput(f"facet 'page' counts page numbers: give interval as a whole number of pages per "
                               f"bucket, not {'dateInterval' if spec.date_interval else spec.interval}")
        if name in seen:
            raise InvalidInput(f"facets name {name!r} twice; each property may appear once")
        seen.add(name)
        if name in _DATE_FIELDS and spec.date_interval is None:
            spec = FacetSpec(name, spec.size, None, DateInterval.MONTH)
        elif name == "page" and spec.interval is None:
            spec = FacetSpec(name, spec.size, float(DEFAULT_PAGE_INTERVAL), None)
        checked.append(spec)
    return tuple(checked), chosen


def facet_stored_fields(specs: Sequence[FacetSpec]) -> frozenset[str]:
    """The stored chunk fields the facets read; the search fetches only these (and identities)."""
    return frozenset(f for spec in specs for f in FACET_FIELDS.get(spec.field, ("metadata",)))


def count_facets(hits: Sequence[Hit], specs: Sequence[FacetSpec], depth: int) -> FacetCounts:
    """Count `hits` (at most `depth` of the search's matches) by each facet."""
    return FacetCounts(depth, len(hits), tuple(_facet(hits, spec) for spec in specs))


def _facet(hits: Sequence[Hit], spec: FacetSpec) -> Facet:
    counts: Counter[Any] = Counter()
    missing = 0
    for hit in hits:
        keys = {key for value in _values(read(hit, spec.field)) if (key := _key(value, spec)) is not None}
        if not keys:
            missing += 1
        counts.update(keys)
    if spec.ranged:
        # The fullest ranges are kept, then shown in range order.
        kept = sorted(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:spec.size])
        buckets = tuple(_range_bucket(start, count, spec) for start, count in kept)
    else:
        kept = sorted(counts.items(), key=lambda kv: (-kv[1], _order(kv[0])))[:spec.size]
        buckets = tuple(Bucket(label=_label(value), count=count, value=value[1]) for value, count in kept)
    return Facet(spec.field, buckets, sum(counts.values()) - sum(b.count for b in buckets), missing)


def _values(value: Any) -> list[Any]:
    """A property's scalar values: a list's scalars, or the value itself; objects and null have none."""
    items = value if isinstance(value, list) else [value]
    return [v for v in items if isinstance(v, (str, int, float, bool, datetime)) and v == v and v != ""]


def _key(value: Any, spec: FacetSpec) -> Any:
    """The bucket a value falls in: a typed value (so 1 and "1" and true stay apart), or a range start."""
    if spec.date_interval is not None:
        moment = _moment(value)
        return None if moment is None else _date_start(moment, spec.date_interval)
    if spec.interval is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isinf(value):
            return None
        offset = 1 if spec.field == "page" else 0  # pages are 1-based: 1-10, 11-20
        return math.floor((value - offset) / spec.interval) * spec.interval + offset
    kind = "bool" if isinstance(value, bool) else "number" if isinstance(value, (int, float)) else "string"
    return (kind, value)


def _order(key: tuple[str, Any]) -> tuple[str, Any]:
    """Values of one kind compare with each other only (kinds first)."""
    return (key[0], key[1] if key[0] == "string" else float(key[1]))


def _label(key: tuple[str, Any]) -> str:
    kind, value = key
    if kind == "bool":
        return "true" if value else "false"
    return value if kind == "string" else f"{value:g}"


def _moment(value: Any) -> datetime | None:
    """A date from a datetime, or an ISO 8601 date or date-time string (UTC when it names no zone)."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _date_start(moment: datetime, interval: DateInterval) -> float:
    """The epoch milliseconds at which the moment's calendar bucket starts (UTC; weeks start on Monday)."""
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if interval is DateInterval.WEEK:
        day -= timedelta(days=day.weekday())
    elif interval is DateInterval.MONTH:
        day = day.replace(day=1)
    elif interval is DateInterval.YEAR:
        day = day.replace(month=1, day=1)
    return day.timestamp() * 1000


def _date_end(start: datetime, interval: DateInterval) -> datetime:
    if interval is DateInterval.DAY:
        return start + timedelta(days=1)
    if interval is DateInterval.WEEK:
        return start + timedelta(days=7)
    if interval is DateInterval.MONTH:
        return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return start.replace(year=start.year + 1)


def _range_bucket(start: float, count: int, spec: FacetSpec) -> Bucket:
    if spec.date_interval is not None:
        begin = datetime.fromtimestamp(start / 1000, tz=UTC)
        end = _date_end(begin, spec.date_interval).timestamp() * 1000
        label = {DateInterval.DAY: "%Y-%m-%d", DateInterval.WEEK: "%Y-%m-%d", DateInterval.MONTH: "%Y-%m",
                 DateInterval.YEAR: "%Y"}[spec.date_interval]
        return Bucket(label=begin.strftime(label), count=count, start=start, end=end)
    assert spec.interval is not None
    end = start + spec.interval
    # Pages are whole numbers: 1-10 holds pages 1 to 10; other ranges are [start, end).
    label = f"{start:g}-{end - 1:g}" if spec.field == "page" else f"{start:g} to {end:g}"
    return Bucket(label=label, count=count, start=start, end=end)
