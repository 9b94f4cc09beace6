"""Opaque cursors over one search's ranked hits (or groups).

A page is cut from the full ranked list of the same search: every page runs the search again
with the same input (so the same `limit`), and the same store ranks the same way, so pages
neither repeat nor skip hits. A cursor is the offset plus a digest of the caller's tenant and
the search input; it holds no data, and a cursor used with another input or by another tenant
does not match its digest and is refused (INVALID_INPUT). The digest needs no secret: knowing
it lets a caller page only through a search it may already run.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.errors import InvalidInput
from gateway.routing.searcher import SearchRequest
from gateway.storage.vectors import vector_digest

T = TypeVar("T")
_VERSION = "c1"
# Enough to tell two searches apart; a cursor stays short in a URL.
_DIGEST_BYTES = 12


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: tuple[T, ...]
    offset: int
    total: int
    end_cursor: str | None

    @property
    def has_next(self) -> bool:
        return self.offset + len(self.items) < self.total


def search_digest(tenant: str, request: SearchRequest) -> str:
    """What a cursor is bound to: the tenant and every input that changes the ranked list."""
    shape = dataclasses.asdict(dataclasses.replace(request, fields=None, vector=None))
    # A query vector by its exact float32 bytes (numpy's text form rounds and elides values); a search
    # without one keeps the digest it had.
    bound = [tenant, shape] if request.vector is None else [tenant, shape, vector_digest(request.vector)]
    text = json.dumps(bound, sort_keys=True, default=str, ensure_ascii=False)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:_DIGEST_BYTES]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def encode_cursor(digest: str, offset: int) -> str:
    raw = f"{_VERSION}:{offset}:{digest}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, digest: str, max_offset: int) -> int:
    """The offset a cursor stands for (the next item to return); refuses foreign or altered cursors."""
    shown = cursor if len(cursor) <= 64 else cursor[:64] + "…"
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        version, offset_text, bound = raw.split(":")
        offset = int(offset_text)
    except ValueError:
        raise InvalidInput(f"after {shown!r} is not a cursor this gateway issued; pass pageInfo.endCursor "
                           "of the previous page, or omit `after` for the first page") from None
    if version != _VERSION or bound != digest:
        raise InvalidInput(f"after {shown!r} is a cursor of another search (input or caller); page with the "
                           "same input as the page it came from, or omit `after` to start over")
    if not 0 <= offset <= max_offset:
        raise InvalidInput(f"after {shown!r} points at offset {offset}; allowed: 0 to {max_offset}")
    return offset


def check_page(digest: str | None, first: int | None, after: str | None, max_limit: int) -> int:
    """The offset to start at; refuses a bad `first` or cursor (before any search runs).

    `digest` is None when no cursor is passed or minted (pageInfo not selected)."""
    if first is not None and not 1 <= first <= max_limit:
        raise InvalidInput(f"first {first} is out of range; allowed: 1 to {max_limit} (GATEWAY_MAX_LIMIT)")
    if after is None:
        return 0
    if digest is None:
        raise ValueError("a cursor is checked against the search's digest")
    return decode_cursor(after, digest, max_limit)


def page(items: Sequence[T], digest: str | None, first: int | None, after: str | None, max_limit: int) -> Page[T]:
    """The `first` items after the cursor (all the rest when `first` is None); no end cursor
    without a digest."""
    offset = check_page(digest, first, after, max_limit)
    end = len(items) if first is None else min(len(items), offset + first)
    chosen = tuple(items[offset:end])
    cursor = encode_cursor(digest, offset + len(chosen)) if chosen and digest is not None else None
    return Page(chosen, offset, len(items), cursor)
