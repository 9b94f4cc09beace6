"""Cursors: opaque, bound to the caller and the input, refused when altered."""

import base64

import pytest

from gateway.errors import InvalidInput
from gateway.graphql.pagination import decode_cursor, encode_cursor, page, search_digest
from gateway.routing.searcher import SearchRequest


def test_pages_walk_the_list_without_repeats_or_gaps():
    digest = search_digest("acme", SearchRequest(query="refunds", limit=7))
    items, seen, after = list(range(7)), [], None
    while True:
        chosen = page(items, digest, 3, after, max_limit=100)
        seen.extend(chosen.items)
        if not chosen.has_next:
            break
        after = chosen.end_cursor
    assert seen == items
    everything = page(items, digest, None, None, max_limit=100)
    assert everything.items == tuple(items) and not everything.has_next and everything.total == 7


def test_a_cursor_is_bound_to_the_tenant_and_the_input_but_not_the_selection():
    request = SearchRequest(query="refunds", limit=7)
    cursor = encode_cursor(search_digest("acme", request), 3)
    assert decode_cursor(cursor, search_digest("acme", SearchRequest(query="refunds", limit=7,
                                                                     fields=frozenset({"text"}))), 100) == 3
    for other in (search_digest("globex", request), search_digest("acme", SearchRequest(query="refunds", limit=8))):
        with pytest.raises(InvalidInput, match="is a cursor of another search"):
            decode_cursor(cursor, other, 100)


def test_altered_or_foreign_cursors_are_refused_with_what_to_send():
    digest = search_digest("acme", SearchRequest(query="refunds"))
    raw = base64.urlsafe_b64decode(encode_cursor(digest, 3) + "==").decode()
    moved = base64.urlsafe_b64encode(raw.replace(":3:", ":90:").encode()).decode()
    assert decode_cursor(moved, digest, 100) == 90  # the offset is not secret: it pages the caller's own search
    with pytest.raises(InvalidInput, match="points at offset 500; allowed: 0 to 100"):
        decode_cursor(base64.urlsafe_b64encode(raw.replace(":3:", ":500:").encode()).decode(), digest, 100)
    with pytest.raises(InvalidInput, match="'not-a-cursor' is not a cursor this gateway issued"):
        decode_cursor("not-a-cursor", digest, 100)
    with pytest.raises(InvalidInput, match="first 0 is out of range; allowed: 1 to 100"):
        page([], digest, 0, None, 100)


def test_a_cursor_is_bound_to_the_exact_query_vector():
    import numpy as np

    # 1,536 dimensions (a common embedding size): numpy's text form shows only the first and last three.
    vector = np.linspace(0.1, 1.0, 1536, dtype=np.float32)
    other = vector.copy()
    other[700] = -1.0
    one = search_digest("acme", SearchRequest(query="", vector=vector))
    assert one == search_digest("acme", SearchRequest(query="", vector=vector.copy()))
    assert one != search_digest("acme", SearchRequest(query="", vector=other))
    assert search_digest("acme", SearchRequest(query="refunds")) != search_digest(
        "acme", SearchRequest(query="refunds", vector=vector))
