import math

import pytest

from gateway.retrieval.fusion import alpha_weights, dbsf, fuse, rrf, weighted
from gateway.retrieval.hit import Hit, Provenance, SignalScore
from gateway.retrieval.options import Fusion
from tests.retrieval.stages.hits import make_hit


def hit(source: str, score: float, signal: str = "dense", rank: int = 1) -> Hit:
    provenance = Provenance(tenant="t", namespace="ns", collection="c", trust_tier="first-party",
                            retriever="collection", mode="hybrid", scores=(SignalScore(signal, score, rank),))
    return Hit(namespace="ns", collection="c", source_id=source, chunk_id="0", content=source,
               score=score, provenance=provenance)


def ranked(signal: str, *pairs: tuple[str, float]) -> list[Hit]:
    return [hit(s, v, signal, r) for r, (s, v) in enumerate(pairs, start=1)]


DENSE = ranked("dense", ("a", 0.9), ("b", 0.8), ("c", 0.5))
SPARSE = ranked("sparse", ("b", 12.0), ("d", 9.0), ("a", 3.0))


def test_rrf_matches_hand_computed_values():
    fused = rrf([DENSE, SPARSE])
    scores = {h.source_id: h.score for h in fused}
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert scores["c"] == pytest.approx(1 / 63)
    assert scores["d"] == pytest.approx(1 / 62)
    assert [h.source_id for h in fused] == ["b", "a", "d", "c"]


def test_rrf_weights_scale_each_list():
    fused = rrf([DENSE, SPARSE], weights=[0.25, 0.75], k=10)
    scores = {h.source_id: h.score for h in fused}
    assert scores["a"] == pytest.approx(0.25 / 11 + 0.75 / 13)
    assert scores["d"] == pytest.approx(0.75 / 12)


def test_dbsf_uses_mean_plus_minus_three_population_sigma():
    fused = dbsf([DENSE, SPARSE])
    mu_d = (0.9 + 0.8 + 0.5) / 3
    sd_d = math.sqrt(((0.9 - mu_d) ** 2 + (0.8 - mu_d) ** 2 + (0.5 - mu_d) ** 2) / 3)
    mu_s = (12 + 9 + 3) / 3
    sd_s = math.sqrt(((12 - mu_s) ** 2 + (9 - mu_s) ** 2 + (3 - mu_s) ** 2) / 3)

    def norm(s, mu, sd):
        return (s - (mu - 3 * sd)) / (6 * sd)

    scores = {h.source_id: h.score for h in fused}
    assert scores["a"] == pytest.approx(norm(0.9, mu_d, sd_d) + norm(3, mu_s, sd_s))
    assert scores["b"] == pytest.approx(norm(0.8, mu_d, sd_d) + norm(12, mu_s, sd_s))
    assert scores["d"] == pytest.approx(norm(9, mu_s, sd_s))


def test_dbsf_clips_outliers_to_unit_interval():
    many = ranked("dense", *[(f"x{i}", 1.0) for i in range(20)], ("top", 100.0))
    fused = dbsf([many])
    assert fused[0].source_id == "top"
    assert fused[0].score == 1.0


def test_weighted_is_min_max_then_alpha():
    fused = weighted([DENSE, SPARSE], weights=alpha_weights(0.7))
    scores = {h.source_id: h.score for h in fused}
    # dense: a=1, b=0.75, c=0 ; sparse: b=1, d=6/9, a=0
    assert scores["a"] == pytest.approx(0.7 * 1.0 + 0.3 * 0.0)
    assert scores["b"] == pytest.approx(0.7 * 0.75 + 0.3 * 1.0)
    assert scores["d"] == pytest.approx(0.3 * (6 / 9))
    assert scores["c"] == pytest.approx(0.0)


def test_alpha_one_is_dense_only_and_zero_is_sparse_only():
    dense_only = weighted([DENSE, SPARSE], weights=alpha_weights(1.0))
    assert [h.source_id for h in dense_only][:3] == ["a", "b", "c"]
    sparse_only = weighted([DENSE, SPARSE], weights=alpha_weights(0.0))
    assert [h.source_id for h in sparse_only][:3] == ["b", "d", "a"]
    with pytest.raises(ValueError, match="alpha must be within"):
        alpha_weights(1.5)


def test_fusion_keeps_every_signal_and_does_not_mutate_inputs():
    before = [(h.score, h.provenance) for h in DENSE + SPARSE]
    fused = fuse(Fusion.RRF, [DENSE, SPARSE])
    b = next(h for h in fused if h.source_id == "b")
    assert {(s.signal, s.raw, s.rank) for s in b.provenance.scores} == {("dense", 0.8, 2), ("sparse", 12.0, 1)}
    assert b.provenance.fused_score == b.score
    assert [(h.score, h.provenance) for h in DENSE + SPARSE] == before


def test_ties_break_by_id_deterministically():
    left = ranked("dense", ("z", 1.0))
    right = ranked("sparse", ("y", 1.0))
    assert [h.source_id for h in rrf([left, right])] == ["y", "z"]
    assert [h.source_id for h in rrf([right, left])] == ["y", "z"]


def test_limit_and_weight_count_are_checked():
    assert len(rrf([DENSE, SPARSE], limit=2)) == 2
    with pytest.raises(ValueError, match="2 weights for 1 lists"):
        rrf([DENSE], weights=[1, 2])


def test_single_hit_list_normalises_to_full_weight():
    assert weighted([ranked("dense", ("solo", 0.3))])[0].score == 1.0
    assert dbsf([ranked("dense", ("solo", 0.3))])[0].score == 0.5


def test_grouping_by_source_fuses_different_best_chunks_of_one_source():
    from dataclasses import replace

    from gateway.retrieval.fusion import best_per_source, source_key

    dense = [replace(hit("a", 0.9, "dense", 1), chunk_id="0"), replace(hit("a", 0.8, "dense", 2), chunk_id="1"),
             hit("b", 0.7, "dense", 3)]
    sparse = [replace(hit("a", 5.0, "sparse", 1), chunk_id="1"), hit("b", 4.0, "sparse", 2)]
    grouped = [best_per_source(dense), best_per_source(sparse)]
    assert [h.chunk_id for h in grouped[0]] == ["0", "0"]
    fused = rrf(grouped, key=source_key)
    assert [h.source_id for h in fused] == ["a", "b"]
    assert fused[0].chunk_id == "0"  # the first list's best chunk represents the source
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 61)


# -- dispatch, forwarding and guards (mutation testing, issue 20) ----------------------------------

def chunk(source: str, chunk_id: str, score: float, signal: str, rank: int) -> Hit:
    from dataclasses import replace

    return replace(hit(source, score, signal, rank), chunk_id=chunk_id)


# Two chunks of source "a" in the dense list: grouping by source changes the answer.
DENSE_CHUNKS = [chunk("a", "0", 0.9, "dense", 1), chunk("b", "0", 0.7, "dense", 2), chunk("a", "1", 0.6, "dense", 3),
                chunk("c", "0", 0.1, "dense", 4)]
SPARSE_CHUNKS = [chunk("c", "0", 8.0, "sparse", 1), chunk("a", "1", 6.0, "sparse", 2),
                 chunk("b", "0", 1.0, "sparse", 3)]


def scored(hits: list[Hit]) -> list[tuple[str, str, float]]:
    return [(h.source_id, h.chunk_id, round(h.score, 12)) for h in hits]


@pytest.mark.parametrize(("method", "direct"), [(Fusion.RRF, rrf), (Fusion.DBSF, dbsf), (Fusion.WEIGHTED, weighted)])
def test_fuse_dispatches_and_forwards_weights_limit_and_key(method, direct):
    from gateway.retrieval.fusion import source_key

    lists = [DENSE_CHUNKS, SPARSE_CHUNKS]
    args = {"weights": [0.9, 0.1], "limit": 2, "key": source_key}
    extra = {"k": 5} if method is Fusion.RRF else {}
    fused = fuse(method, lists, **args, **extra)
    assert scored(fused) == scored(direct(lists, **args, **extra))
    # Each argument changes the answer, so dropping any of them would be noticed.
    assert len(fused) == 2
    assert scored(fused) != scored(direct(lists, **{**args, "weights": None}, **extra))
    assert scored(fused) != scored(direct(lists, **{**args, "key": hit_key}, **extra))
    assert scored(direct(lists, **{**args, "limit": None}, **extra))[:2] == scored(fused)


def hit_key(h: Hit):
    return h.key


def test_fuse_passes_k_to_rrf_only():
    assert scored(fuse(Fusion.RRF, [DENSE], k=0)) == [("a", "0", 1.0), ("b", "0", 0.5), ("c", "0", round(1 / 3, 12))]
    assert scored(fuse(Fusion.RRF, [DENSE])) == scored(rrf([DENSE], k=60))


def test_each_method_gives_its_own_hand_computed_scores():
    lists = [DENSE, SPARSE]
    assert fuse(Fusion.RRF, lists)[0].score == pytest.approx(1 / 62 + 1 / 61)
    mu, sd = 8.0, math.sqrt(42 / 3)  # sparse: 12, 9, 3
    mu_d = 2.2 / 3
    sd_d = math.sqrt(((0.9 - mu_d) ** 2 + (0.8 - mu_d) ** 2 + (0.5 - mu_d) ** 2) / 3)
    dbsf_b = (0.8 - (mu_d - 3 * sd_d)) / (6 * sd_d) + (12 - (mu - 3 * sd)) / (6 * sd)
    assert next(h for h in fuse(Fusion.DBSF, lists) if h.source_id == "b").score == pytest.approx(dbsf_b)
    assert next(h for h in fuse(Fusion.WEIGHTED, lists) if h.source_id == "b").score == pytest.approx(0.75 + 1.0)


def test_dbsf_weights_scale_each_list():
    fused = {h.source_id: h.score for h in dbsf([DENSE, SPARSE], weights=[2.0, 0.0])}
    plain = {h.source_id: h.score for h in dbsf([DENSE])}
    assert fused["a"] == pytest.approx(2 * plain["a"])
    assert fused["d"] == 0.0


def test_rrf_k_zero_is_allowed_and_negative_k_is_refused():
    assert [h.score for h in rrf([DENSE], k=0)] == [1.0, 0.5, pytest.approx(1 / 3)]
    with pytest.raises(ValueError, match=r"^rrf k must be >= 0, got -1$"):
        rrf([DENSE], k=-1)


@pytest.mark.parametrize("method", list(Fusion))
def test_a_list_repeating_a_hit_counts_it_once_at_its_best_rank(method):
    repeated = [hit("a", 0.9, "dense", 1), hit("a", 0.8, "dense", 2), hit("b", 0.5, "dense", 3)]
    fused = {h.source_id: h.score for h in fuse(method, [repeated])}
    assert set(fused) == {"a", "b"}
    if method is Fusion.RRF:
        assert fused == {"a": pytest.approx(1 / 61), "b": pytest.approx(1 / 63)}
    if method is Fusion.WEIGHTED:
        assert fused == {"a": 1.0, "b": 0.0}


def test_weighted_limit_and_dbsf_limit():
    assert [h.source_id for h in weighted([DENSE, SPARSE], limit=1)] == ["b"]
    assert len(dbsf([DENSE, SPARSE], limit=3)) == 3
    assert rrf([DENSE, SPARSE], limit=0) == []


def test_dbsf_clips_low_outliers_to_zero():
    many = ranked("dense", *[(f"x{i}", 100.0) for i in range(20)], ("low", 0.0))
    assert dbsf([many])[-1].source_id == "low"
    assert dbsf([many])[-1].score == 0.0


def test_empty_lists_add_nothing():
    assert rrf([]) == []
    assert scored(rrf([[], DENSE])) == scored(rrf([DENSE, []]))
    assert [h.score for h in weighted([[], ranked("dense", ("a", 2.0), ("b", 1.0))])] == [1.0, 0.0]
    assert dbsf([[]]) == []


def test_weight_count_message():
    with pytest.raises(ValueError, match=r"^1 weights for 2 lists$"):
        weighted([DENSE, SPARSE], weights=[1.0])
    with pytest.raises(ValueError, match=r"^3 weights for 2 lists$"):
        dbsf([DENSE, SPARSE], weights=[1.0, 1.0, 1.0])


def test_alpha_bounds_are_inclusive():
    assert alpha_weights(None) is None
    assert alpha_weights(0.0) == (0.0, 1.0)
    assert alpha_weights(1.0) == (1.0, 0.0)
    assert alpha_weights(0.25) == (0.25, 0.75)
    for alpha in (-0.01, 1.01):
        with pytest.raises(ValueError, match=rf"^alpha must be within \[0, 1\], got {alpha}$"):
            alpha_weights(alpha)


def test_fused_hit_keeps_its_first_appearance_and_each_signal_once():
    first = hit("a", 0.9, "dense", 1)
    again = hit("a", 0.9, "dense", 1)  # the same signal score, reported by a second list
    sparse = hit("a", 4.0, "sparse", 1)
    fused = rrf([[first], [again], [sparse]])[0]
    assert fused.provenance.scores == (SignalScore("dense", 0.9, 1), SignalScore("sparse", 4.0, 1))
    assert fused.content == "a" and fused.provenance.fused_score == fused.score == pytest.approx(3 / 61)


def test_best_per_source_keeps_the_first_chunk_of_each_source_in_order():
    from gateway.retrieval.fusion import best_per_source

    kept = best_per_source(DENSE_CHUNKS)
    assert [(h.source_id, h.chunk_id) for h in kept] == [("a", "0"), ("b", "0"), ("c", "0")]
    assert best_per_source([]) == []


def test_round_robin_interleaves_lists_and_keeps_each_hit_once():
    from gateway.retrieval.fusion import round_robin
    first = ranked("rerank:a", ("x", 9.0), ("y", 8.0), ("z", 7.0))
    second = ranked("rerank:b", ("y", 0.9), ("w", 0.5))
    out = round_robin([first, second])
    # x (1st of a), y (1st of b), then a's 2nd is y again (skipped), b's 2nd w, then a's 3rd z.
    assert [h.source_id for h in out] == ["x", "y", "w", "z"]
    assert [h.score for h in out] == [1.0, 0.5, pytest.approx(1 / 3), 0.25]
    y = out[1]
    assert [(s.signal, s.raw, s.rank) for s in y.provenance.scores] == [("rerank:b", 0.9, 1), ("rerank:a", 8.0, 2)]
    assert y.provenance.fused_score == 0.5 and first[1].score == 8.0  # inputs untouched
    assert round_robin([]) == [] and [h.source_id for h in round_robin([first])] == ["x", "y", "z"]


def test_round_robin_goes_on_with_the_longer_lists_when_one_runs_out():
    from gateway.retrieval.fusion import round_robin
    short, long = ranked("rerank:a", ("a", 1.0)), ranked("rerank:b", ("x", 3.0), ("y", 2.0), ("z", 1.0))
    assert [h.source_id for h in round_robin([short, long])] == ["a", "x", "y", "z"]
    assert [h.source_id for h in round_robin([[], short])] == ["a"]


def test_round_robin_tells_collections_apart():
    from gateway.retrieval.fusion import round_robin
    other = Hit(namespace="ns", collection="other", source_id="x", chunk_id="0", content="x", score=1.0,
                provenance=Provenance(tenant="t", namespace="ns", collection="other", trust_tier="partner",
                                      retriever="collection", mode="hybrid"))
    out = round_robin([ranked("dense", ("x", 2.0)), [other]])
    assert [(h.collection, h.source_id) for h in out] == [("c", "x"), ("other", "x")]


@pytest.mark.parametrize("method", list(Fusion))
@pytest.mark.parametrize("weights", [None, (0.3, 0.7)])
def test_fusing_ids_and_scores_ranks_as_fusing_hits(method, weights):
    from gateway.retrieval.fusion import fuse_scores

    lists = [DENSE, SPARSE]
    pairs = [[(h.source_id, h.score) for h in hits] for hits in lists]
    fused = fuse(method, lists, weights=weights, limit=3, k=10)
    scored = fuse_scores(method, pairs, tie=lambda key: f"ns/{key}/0", weights=weights, limit=3, k=10)
    assert [key for key, _ in scored] == [h.source_id for h in fused]
    assert [total for _, total in scored] == pytest.approx([h.score for h in fused])


def test_fusing_scores_breaks_ties_by_the_tie_key_and_counts_a_repeat_once():
    from gateway.retrieval.fusion import fuse_scores

    # Two identities with equal totals: `tie` orders them; a repeated entry counts once, at its best rank.
    scored = fuse_scores(Fusion.RRF, [[("x", 1.0), ("y", 0.5), ("x", 0.1)], [("y", 2.0), ("x", 1.0)]],
                         tie=lambda key: {"x": "2", "y": "1"}[key], k=0)
    assert scored == [("y", pytest.approx(1.5)), ("x", pytest.approx(1.5))]
    with pytest.raises(ValueError, match="rrf k must be >= 0"):
        fuse_scores(Fusion.RRF, [[("x", 1.0)]], tie=str, k=-1)
    with pytest.raises(ValueError, match="1 weights for 2 lists"):
        fuse_scores(Fusion.WEIGHTED, [[("x", 1.0)], [("x", 2.0)]], tie=str, weights=[1.0])


def test_fused_scores_order_ties_within_a_limit_and_ask_the_tie_key_of_tied_identities_only():
    from gateway.retrieval.fusion import fuse_scores

    order = {"a": "5", "b": "4", "c": "3", "d": "2", "e": "1", "f": "0"}
    # Weighted sum of one list: a, then b, c and d tied, then e and f tied.
    entries = [("a", 3.0), ("b", 1.0), ("c", 1.0), ("d", 1.0), ("e", 0.0), ("f", 0.0)]
    for limit, expected in ((3, ["a", "d", "c"]), (4, ["a", "d", "c", "b"]), (6, ["a", "d", "c", "b", "f", "e"])):
        asked: list[str] = []

        def tie(key: str) -> str:
            asked.append(key)
            return order[key]

        scored = fuse_scores(Fusion.WEIGHTED, [entries], tie=tie, limit=limit)
        assert [key for key, _ in scored] == expected
        # Only tied identities are asked, and none past the group that fills the limit.
        assert sorted(asked) == (["b", "c", "d"] if limit < 6 else ["b", "c", "d", "e", "f"])


def test_a_hit_repeated_in_one_list_adds_its_signal_once():
    repeated = [hit("a", 0.9, "dense", 1), hit("a", 0.4, "dense", 2), hit("b", 0.3, "dense", 3)]
    [first, _] = rrf([repeated])
    assert first.source_id == "a" and first.provenance.scores == (SignalScore("dense", 0.9, 1),)


def test_scaled_multiplies_each_score_by_its_factor_and_ranks_again():
    import dataclasses

    from gateway.retrieval.fusion import scaled

    a = make_hit("a", 0.9, collection="docs")
    b = make_hit("b", 0.6, collection="tickets")
    c = dataclasses.replace(make_hit("c", 0.5, collection="tickets"), provenance=dataclasses.replace(
        make_hit("c", 0.5, collection="tickets").provenance, fused_score=0.5))
    factor = {"docs": 0.5, "tickets": 2.0}
    out = scaled([a, b, c], lambda h: factor[h.collection])
    assert [(h.source_id, h.score) for h in out] == [("b", 1.2), ("c", 1.0), ("a", 0.45)]
    # The fused score scales with the score; a hit without one keeps None.
    assert [h.provenance.fused_score for h in out] == [None, 1.0, None]
    assert (a.score, c.provenance.fused_score) == (0.9, 0.5)  # inputs untouched
    assert [h.source_id for h in scaled([a, b, c], lambda h: factor[h.collection], limit=2)] == ["b", "c"]
    assert scaled([a, b, c], lambda h: 1.0, limit=0) == []


def test_scaled_breaks_ties_by_id_and_refuses_a_negative_factor():
    from gateway.retrieval.fusion import scaled

    z, y = make_hit("z", 1.0), make_hit("y", 0.5)
    assert [h.source_id for h in scaled([z, y], lambda h: 1.0 if h.source_id == "y" else 0.5)] == ["y", "z"]
    assert [h.score for h in scaled([z, y], lambda h: 0.0)] == [0.0, 0.0]
    assert [h.source_id for h in scaled([z, y], lambda h: 0.0)] == ["y", "z"]
    with pytest.raises(ValueError, match=r"a score factor must be >= 0, got -1 for support/docs/z/c0"):
        scaled([z, y], lambda h: -1)
