import math

import pytest

from gateway.retrieval.fusion import alpha_weights, dbsf, fuse, rrf, weighted
from gateway.retrieval.hit import Hit, Provenance, SignalScore
from gateway.retrieval.options import Fusion


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
