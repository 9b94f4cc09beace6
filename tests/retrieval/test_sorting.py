"""Sorting ranked hits by stored properties: order, missing values, ties, refusals."""

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from gateway.errors import InvalidInput
from gateway.retrieval.sorting import SortKey, SortOrder, check_sort, sort_hits, sort_stored_fields
from tests.retrieval.stages.hits import make_hit

ASC, DESC = SortOrder.ASC, SortOrder.DESC


def _ids(hits):
    return [h.source_id for h in hits]


def test_values_missing_and_mixed_kinds():
    hits = [make_hit("a", 0.9, metadata={"year": 2024}), make_hit("b", 0.8, metadata={}),
            make_hit("c", 0.7, metadata={"year": 2026}), make_hit("d", 0.6, metadata={"year": "unknown"}),
            make_hit("e", 0.5, metadata={"year": [2025]}), make_hit("f", 0.4, metadata={"year": float("nan")})]
    # Numbers before strings ascending; a missing value, a list or NaN last in both directions.
    assert _ids(sort_hits(hits, [SortKey("metadata.year", ASC)])) == ["a", "c", "d", "b", "e", "f"]
    assert _ids(sort_hits(hits, [SortKey("metadata.year", DESC)])) == ["d", "c", "a", "b", "e", "f"]
    assert _ids(hits) == ["a", "b", "c", "d", "e", "f"]  # the input is not reordered


def test_equal_keys_keep_the_ranked_order_and_later_keys_break_ties():
    hits = [make_hit("a", 0.9, metadata={"status": "open", "p": 1}), make_hit("b", 0.8, metadata={"status": "closed", "p": 2}),
            make_hit("c", 0.7, metadata={"status": "open", "p": 2}), make_hit("d", 0.6, metadata={"status": "closed", "p": 2})]
    assert _ids(sort_hits(hits, [SortKey("metadata.status")])) == ["b", "d", "a", "c"]
    assert _ids(sort_hits(hits, [SortKey("metadata.p", DESC), SortKey("metadata.status", DESC)])) == ["c", "b", "d", "a"]


def test_dates_titles_and_pages():
    early, late = datetime(2025, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)
    hits = [replace(make_hit("a", 0.9, title="Zeta"), provenance=replace(make_hit("a", 0.9).provenance, ingested_at=early)),
            replace(make_hit("b", 0.8, title="alpha", metadata={"page": 3}),
                    provenance=replace(make_hit("b", 0.8).provenance, ingested_at=late)),
            make_hit("c", 0.7, title="Beta", metadata={"page": 1})]
    assert _ids(sort_hits(hits, [SortKey("created_at", DESC)])) == ["b", "a", "c"]
    assert _ids(sort_hits(hits, [SortKey("title")])) == ["c", "a", "b"]  # code points: upper case first
    assert _ids(sort_hits(hits, [SortKey("page")])) == ["c", "b", "a"]


def test_the_fields_a_sort_reads():
    assert sort_stored_fields([SortKey("created_at"), SortKey("page"), SortKey("metadata.year")]) == {
        "created_at", "metadata"}


@pytest.mark.parametrize("keys, message", [
    ([SortKey("score")], "sort field 'score' is unknown; allowed: created_at, page, source_id, source_path, "
                         "source_url, title, updated_at, or metadata.<key>"),
    ([SortKey("metadata.bad key")], "sort field 'metadata.bad key' is unknown"),
    ([SortKey("title"), SortKey("page"), SortKey("source_id"), SortKey("updated_at")], "sort has 4 keys; allowed: at most 3"),
    ([SortKey("title"), SortKey("title", DESC)], "sort names 'title' twice"),
])
def test_bad_keys_are_refused(keys, message):
    with pytest.raises(InvalidInput, match=message):
        check_sort(keys)


def test_a_field_that_is_not_a_plain_metadata_key_never_gets_further():
    for field in ('metadata.year"] > 0 or metadata["year', "metadata.", "metadata.a-b", "tenant", "text"):
        with pytest.raises(InvalidInput, match="is unknown; allowed: created_at"):
            check_sort([SortKey(field)])
