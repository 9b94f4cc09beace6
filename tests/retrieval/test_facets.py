"""Facet counting over hits: value and range buckets, size, other, missing, and refusals."""

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from gateway.errors import InvalidInput
from gateway.retrieval.facets import (DateInterval, FacetSpec, check_facets, count_facets, facet_stored_fields)
from tests.retrieval.stages.hits import make_hit


def _dated(source_id: str, when: datetime, **kwargs):
    hit = make_hit(source_id, 0.5, **kwargs)
    return replace(hit, provenance=replace(hit.provenance, ingested_at=when))


def test_value_buckets_largest_first_with_other_and_missing():
    hits = [make_hit("a", 1, metadata={"tag": ["x", "y", "x"]}), make_hit("b", 1, metadata={"tag": "y"}),
            make_hit("c", 1, metadata={"tag": "z"}), make_hit("d", 1, metadata={}),
            make_hit("e", 1, metadata={"tag": 1}), make_hit("f", 1, metadata={"tag": True})]
    counts = count_facets(hits, [FacetSpec("metadata.tag", size=2)], depth=10)
    assert (counts.counted, counts.complete) == (6, True)
    (facet,) = counts.facets
    # A list counts each of its values once per hit; 1 and true stay apart; ties by kind then value.
    assert [(b.label, b.count, b.value) for b in facet.buckets] == [("y", 2, "y"), ("true", 1, True)]
    assert (facet.other, facet.missing) == (3, 1)  # x, 1 and z; d has no tag


def test_collections_and_sources():
    hits = [make_hit("a", 1), make_hit("a", 1, chunk_id="c1"), make_hit("b", 1, collection="tickets")]
    counts = count_facets(hits, [FacetSpec("collection"), FacetSpec("source_id")], depth=3)
    assert counts.complete is False  # as many hits as the depth: there may be more matches
    assert [(b.label, b.count) for b in counts.facets[0].buckets] == [("support/docs", 2), ("support/tickets", 1)]
    assert [(b.value, b.count) for b in counts.facets[1].buckets] == [("a", 2), ("b", 1)]


def test_page_and_number_ranges_in_order():
    hits = [make_hit(str(p), 1, metadata={"page": p, "price": price})
            for p, price in ((1, 9.5), (10, 10.0), (11, -0.5), (25, 19.99))] + [make_hit("none", 1)]
    (spec_page, spec_price), _ = check_facets([FacetSpec("page"), FacetSpec("metadata.price", interval=10)], None)
    page, price = count_facets(hits, [spec_page, spec_price], depth=100).facets
    assert [(b.label, b.count, b.start, b.end) for b in page.buckets] == [
        ("1-10", 2, 1, 11), ("11-20", 1, 11, 21), ("21-30", 1, 21, 31)]
    assert page.missing == 1
    assert [(b.label, b.count) for b in price.buckets] == [("-10 to 0", 1), ("0 to 10", 1), ("10 to 20", 2)]


def test_date_buckets_in_utc_and_iso_metadata_dates():
    hits = [_dated("a", datetime(2026, 11, 26, 23, 30, tzinfo=UTC)), _dated("b", datetime(2026, 11, 23, tzinfo=UTC)),
            _dated("c", datetime(2025, 12, 31, tzinfo=UTC), metadata={"due": "2026-02-03"}),
            make_hit("d", 1, metadata={"due": "2026-02-28T10:00:00+02:00"}), make_hit("e", 1, metadata={"due": "soon"})]
    weeks, months, years, due = count_facets(hits, [
        FacetSpec("created_at", date_interval=DateInterval.WEEK), FacetSpec("created_at", date_interval=DateInterval.MONTH),
        FacetSpec("created_at", date_interval=DateInterval.YEAR), FacetSpec("metadata.due", date_interval=DateInterval.MONTH)],
        depth=10).facets
    assert [(b.label, b.count) for b in weeks.buckets] == [("2025-12-29", 1), ("2026-11-23", 2)]
    dec = datetime(2025, 12, 1, tzinfo=UTC).timestamp() * 1000
    assert [(b.label, b.count, b.start, b.end) for b in months.buckets][0] == (
        "2025-12", 1, dec, datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert [(b.label, b.count) for b in years.buckets] == [("2025", 1), ("2026", 2)]
    assert years.missing == 2
    assert [(b.label, b.count) for b in due.buckets] == [("2026-02", 2)] and due.missing == 3


def test_ranges_past_size_keep_the_fullest():
    hits = [make_hit(str(i), 1, metadata={"n": n}) for i, n in enumerate([1, 1, 1, 5, 5, 9])]
    (facet,) = count_facets(hits, [FacetSpec("metadata.n", size=2, interval=2)], depth=10).facets
    assert [(b.label, b.count) for b in facet.buckets] == [("0 to 2", 3), ("4 to 6", 2)] and facet.other == 1


def test_defaults_and_the_fields_read():
    specs, depth = check_facets([FacetSpec("created_at"), FacetSpec("page")], None)
    assert depth == 200 and specs == (FacetSpec("created_at", date_interval=DateInterval.MONTH),
                                      FacetSpec("page", interval=10.0))
    assert facet_stored_fields([FacetSpec("collection"), FacetSpec("source_id")]) == frozenset()
    assert facet_stored_fields(specs) == {"created_at", "metadata"}


@pytest.mark.parametrize("specs, depth, message", [
    ([FacetSpec("text")], None, "facet field 'text' is unknown; allowed: collection, created_at, modality, page, "
                                "source_id, title, updated_at, or metadata.<key>"),
    ([FacetSpec("source_id", size=0)], None, "facet 'source_id' asks for 0 buckets; allowed: 1 to 100"),
    ([FacetSpec("source_id", size=101)], None, "asks for 101 buckets; allowed: 1 to 100"),
    ([FacetSpec(f"metadata.k{i}") for i in range(11)], None, "facets has 11 entries; allowed: at most 10"),
    ([FacetSpec("source_id")], 1001, "facetDepth 1001 is out of range; allowed: 1 to 1000"),
    ([FacetSpec("created_at", interval=7)], None, "facet 'created_at' is a date: give dateInterval"),
    ([FacetSpec("collection", interval=7)], None, "facet 'collection' counts values and takes no interval"),
    ([FacetSpec("page", interval=2.5)], None, "facet 'page' counts page numbers: give interval as a whole number"),
    ([FacetSpec("metadata.n", interval=0)], None, "interval 0 is not a positive finite number"),
    ([FacetSpec("metadata.n", interval=1, date_interval=DateInterval.DAY)], None, "has interval and dateInterval"),
    ([FacetSpec("title"), FacetSpec("title")], None, "facets name 'title' twice"),
])
def test_bad_facets_are_refused(specs, depth, message):
    with pytest.raises(InvalidInput, match=message):
        check_facets(specs, depth)


def test_a_field_that_is_not_a_plain_metadata_key_never_gets_further():
    # Facets are counted in the gateway; a field is a known name or metadata.<identifier>, nothing else.
    for field in ('metadata.status"] == "x" or metadata["status', "metadata.", "metadata.a.b", "tenant", "namespace"):
        with pytest.raises(InvalidInput, match="is unknown; allowed: collection"):
            check_facets([FacetSpec(field)], None)
