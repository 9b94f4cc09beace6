"""The dense index policy: which index a collection of a given size gets, and its parameters."""

import pytest

from gateway.storage.indexes import AUTO_ROWS, EF_BY_ROWS, HNSW_EF, DenseIndex, DenseIndexKind, IndexState, default_ef


def test_auto_is_exact_while_small_and_hnsw_from_its_threshold_on_milvus_lite():
    policy = DenseIndex()
    assert policy.index_type(0, "FLAT") == "FLAT"
    assert policy.index_type(AUTO_ROWS - 1, "FLAT") == "FLAT"
    assert policy.index_type(AUTO_ROWS, "FLAT") == "HNSW"
    assert DenseIndex(auto_rows=10).index_type(10, "FLAT") == "HNSW"


def test_auto_on_a_server_is_its_own_choice_from_the_first_row():
    assert DenseIndex().index_type(0, "HNSW") == "HNSW"


@pytest.mark.parametrize("kind, index_type", [(DenseIndexKind.FLAT, "FLAT"), (DenseIndexKind.HNSW, "HNSW"),
                                              (DenseIndexKind.HNSW_SQ, "HNSW_SQ"), (DenseIndexKind.IVF_FLAT, "IVF_FLAT"),
                                              (DenseIndexKind.IVF_SQ8, "IVF_SQ8")])
def test_a_named_index_is_kept_at_any_size(kind, index_type):
    assert DenseIndex(kind=kind).index_type(0, "FLAT") == index_type
    assert DenseIndex(kind=kind).index_type(10**7, "HNSW") == index_type


def test_graph_indexes_search_at_least_as_deep_as_the_hits_asked_for():
    policy = DenseIndex(ef=64, nprobe=16, nlist=256, m=32, ef_construction=100)
    assert policy.search_params("HNSW", 10) == {"ef": 64}
    assert policy.search_params("HNSW_SQ", 200) == {"ef": 200}
    assert policy.search_params("IVF_SQ8", 200) == {"nprobe": 16}
    assert policy.search_params("FLAT", 200) == {}
    assert policy.build_params("HNSW") == {"M": 32, "efConstruction": 100}
    assert policy.build_params("IVF_FLAT") == {"nlist": 256}
    assert policy.build_params("FLAT") == {}


def test_the_default_search_depth_grows_with_the_collections_rows():
    tiers = ((0, 64), (100_000, 128), (500_000, 256))
    assert [default_ef(rows, tiers) for rows in (None, 0, 99_999, 100_000, 499_999, 500_000, 10**8)] == \
        [64, 64, 64, 128, 128, 256, 256]
    policy = DenseIndex(ef_by_rows=tiers)
    assert policy.search_params("HNSW", 10, rows=1_000_000) == {"ef": 256}
    assert policy.search_params("HNSW_SQ", 10, rows=1_000) == {"ef": 64}
    assert policy.search_params("HNSW", 300, rows=1_000_000) == {"ef": 300}  # still at least the hits asked for
    assert policy.search_params("IVF_FLAT", 10, rows=1_000_000) == {"nprobe": 32}


def test_the_shipped_rule_starts_at_the_measured_ef_and_never_searches_shallower_as_a_collection_grows():
    assert EF_BY_ROWS[0] == (0, HNSW_EF) and default_ef(None) == HNSW_EF
    starts, efs = zip(*EF_BY_ROWS)
    assert list(starts) == sorted(set(starts)) and list(efs) == sorted(efs)
    # docs/benchmarks.md ("HNSW's search depth"): recall@10 0.95 at 100,000 and 1,000,000 chunks needs ef 128;
    # below AUTO_ROWS (exact search under `auto`, SciFact under a named hnsw) ef stays 64.
    assert default_ef(AUTO_ROWS) >= 128 and default_ef(1_000_000) >= 128 and default_ef(AUTO_ROWS - 1) == HNSW_EF


def test_an_ef_the_tenant_file_sets_is_kept_at_any_size():
    policy = DenseIndex(ef=48)
    assert [policy.search_params("HNSW", 10, rows=rows)["ef"] for rows in (None, 0, 10**6, 10**8)] == [48] * 4


def test_an_index_describes_itself_with_its_parameters():
    assert IndexState("HNSW", {"M": 16, "efConstruction": 200}, {"ef": 64}).describe() == \
        "HNSW (M=16, efConstruction=200; ef=64)"
    assert IndexState("FLAT", {}, {}).describe() == "FLAT"
