"""Reading a named field of a hit, for stages configured by field name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gateway.retrieval.hit import Hit

METADATA_PREFIX = "metadata."
# Hit fields a stage may name besides `metadata.<key>`.
HIT_FIELDS = ("created_at", "updated_at", "score")


def field_value(hit: Hit, name: str) -> Any:
    """The value of `created_at`, `updated_at`, `score` or `metadata.<key>`; None when absent."""
    if name.startswith(METADATA_PREFIX):
        return hit.metadata.get(name[len(METADATA_PREFIX):])
    if name == "created_at":
        return hit.provenance.ingested_at
    if name == "updated_at":
        return hit.provenance.updated_at
    if name == "score":
        return hit.score
    raise KeyError(name)


def valid_field(name: str) -> bool:
    return name in HIT_FIELDS or (name.startswith(METADATA_PREFIX) and len(name) > len(METADATA_PREFIX))


def as_datetime(value: Any) -> datetime | None:
    """A timestamp from a datetime, epoch seconds or milliseconds, or an ISO-8601 string."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        # Values past year 33658 in seconds are taken as milliseconds.
        seconds = value / 1000 if abs(value) > 1e12 else value
        try:
            return datetime.fromtimestamp(seconds, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None
