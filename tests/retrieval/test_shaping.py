"""Autocut and grouping over ranked hits, against hand-computed values."""

from gateway.retrieval.hit import Hit, Provenance
from gateway.retrieval.shaping import GroupBy, Shaping, autocut_count, group_by_source, shape


def hit(source: str, chunk: str, score: float, collection: str = "docs") -> Hit:
    return Hit("ns", collection, source, chunk, f"{source} {chunk}", score,
               Provenance("acme", "ns", collection, "first-party", "collection", "dense"))


def test_autocut_keeps_what_comes_before_the_first_jump():
    # Normalised onto [0, 1] (first 0, last 1) minus the straight line i/4:
    # [0, -0.226, -0.451, 0.226, 0]: the point after the jump (index 3) is the extremum, so 3 are kept.
    assert autocut_count([0.91, 0.90, 0.89, 0.51, 0.50], 1) == 3
    # Weaviate's own example shape, as distances (ascending): the same cut.
    assert autocut_count([0.10, 0.11, 0.12, 0.50, 0.51], 1) == 3


def test_autocut_counts_jumps():
    scores = [1.0, 0.99, 0.7, 0.69, 0.4, 0.39]
    # diff = [0, -0.184, 0.092, -0.092, 0.184, 0]: extrema at 2 and 4; the last point is none.
    assert autocut_count(scores, 1) == 2
    assert autocut_count(scores, 2) == 4
    assert autocut_count(scores, 3) == 6


def test_autocut_keeps_everything_without_a_spread():
    assert autocut_count([], 1) == 0
    assert autocut_count([0.5], 1) == 1
    assert autocut_count([0.5, 0.5, 0.5], 1) == 3
    assert autocut_count([0.9, 0.1], 1) == 2  # two points: a straight line has no bend


def test_groups_follow_their_best_hit_and_keep_at_most_n():
    hits = [hit("a", "0", 0.9), hit("b", "0", 0.8), hit("a", "1", 0.7), hit("a", "2", 0.6), hit("b", "1", 0.5),
            hit("a", "0", 0.4, collection="wiki")]
    groups = group_by_source(hits, 2)
    assert [(g.collection, g.source_id, [h.chunk_id for h in g.hits]) for g in groups] == [
        ("docs", "a", ["0", "1"]), ("docs", "b", ["0", "1"]), ("wiki", "a", ["0"])]
    assert groups[0].score == 0.9


def test_shape_cuts_before_it_groups():
    hits = [hit("a", "0", 0.9), hit("b", "0", 0.89), hit("a", "1", 0.88), hit("c", "0", 0.2), hit("c", "1", 0.19)]
    kept, groups = shape(hits, Shaping(autocut=1, group_by=GroupBy.SOURCE, hits_per_group=5))
    assert groups is not None and [g.source_id for g in groups] == ["a", "b"]
    assert [(h.source_id, h.chunk_id) for h in kept] == [("a", "0"), ("a", "1"), ("b", "0")]
    assert shape(hits, Shaping()) == (tuple(hits), None)


def test_sort_runs_after_autocut_and_before_grouping():
    from gateway.retrieval.sorting import SortKey, SortOrder
    from tests.retrieval.stages.hits import make_hit

    hits = [make_hit("a", 0.95, chunk_id="0", metadata={"year": 2024}), make_hit("b", 0.9, metadata={"year": 2026}),
            make_hit("a", 0.85, chunk_id="1", metadata={"year": 2025}), make_hit("c", 0.1, metadata={"year": 2030})]
    kept, groups = shape(hits, Shaping(autocut=1, group_by=GroupBy.SOURCE,
                                       sort=(SortKey("metadata.year", SortOrder.DESC),)))
    # Autocut read the score curve first (c, after the jump, is gone); then the year order; then groups.
    assert [(h.source_id, h.chunk_id) for h in kept] == [("b", "c0"), ("a", "1"), ("a", "0")]
    assert [g.source_id for g in groups] == ["b", "a"]
