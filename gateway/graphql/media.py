"""Which media type a GraphQL answer is sent as, from the request's Accept header.

The GraphQL-over-HTTP spec defines `application/graphql-response+json`: with it, a request
error (the document does not parse or validate, a variable does not coerce, a persisted query
is unknown) is HTTP 400 and the body has no `data` entry, so a client can tell it from a field
error by the status alone. `application/json` keeps the legacy rules (HTTP 200 for any
well-formed request) for clients that ask for it or send no Accept header.
"""

from __future__ import annotations

from enum import StrEnum


class Media(StrEnum):
    JSON = "application/json"
    GRAPHQL_RESPONSE = "application/graphql-response+json"


def negotiate(accept: str | None) -> Media:
    """The accepted type with the highest q; graphql-response+json wins a tie, as the spec asks.

    `*/*`, `application/*`, an absent header or one naming neither type give application/json:
    the spec allows it for compatibility, and it is what every pre-spec client parses.
    """
    best: tuple[float, int, Media] | None = None
    for part in (accept or "").split(","):
        media_range, *params = (piece.strip() for piece in part.split(";"))
        media = _MEDIA.get(media_range.lower())
        if media is None:
            continue
        quality = _quality(params)
        if quality <= 0:
            continue
        candidate = (quality, media is Media.GRAPHQL_RESPONSE, media)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    return best[2] if best is not None else Media.JSON


_MEDIA = {media.value: media for media in Media}


def _quality(params: list[str]) -> float:
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                return min(max(float(value.strip()), 0.0), 1.0)
            except ValueError:
                return 0.0
    return 1.0
