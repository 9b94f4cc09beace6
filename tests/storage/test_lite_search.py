"""The brute-force cosine search without per-query copies ranks and scores as milvus-lite's own."""

import numpy as np
import pytest
from milvus_lite.index.brute_force import BruteForceIndex

from gateway.storage import bulk, lite_search


@pytest.mark.parametrize("masked", [False, True])
def test_the_same_neighbours_and_distances_as_the_engine(masked):
    assert bulk.patch_engine() and BruteForceIndex.search is lite_search.search
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((500, 16)).astype(np.float32) * rng.uniform(0.5, 2, (500, 1)).astype(np.float32)
    vectors[7] = 0  # a zero vector: distance 1, as the engine has it
    index = BruteForceIndex(vectors, "COSINE")
    queries = rng.standard_normal((3, 16)).astype(np.float32)
    mask = rng.random(500) > 0.3 if masked else None
    ids, dists = lite_search.search(index, queries, 10, mask)
    want_ids, want_dists = lite_search._original(index, queries, 10, mask)
    assert ids.tolist() == want_ids.tolist()
    np.testing.assert_allclose(dists, want_dists, atol=1e-5)
    few = np.zeros(500, dtype=bool)
    few[[3, 7]] = True  # fewer valid rows than k: padded with -1 and inf, as the engine pads
    got, want = lite_search.search(index, queries, 5, few), lite_search._original(index, queries, 5, few)
    assert got[0].tolist() == want[0].tolist() and np.allclose(got[1], want[1], atol=1e-5)
