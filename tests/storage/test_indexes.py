"""The dense index policy: which index a collection of a given size gets, and its parameters."""

import pytest

from gateway.storage.indexes import AUTO_ROWS, DenseIndex, DenseIndexKind, IndexState


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


def test_an_index_describes_itself_with_its_parameters():
    assert IndexState("HNSW", {"M": 16, "efConstruction": 200}, {"ef": 64}).describe() == \
        "HNSW (M=16, efConstruction=200; ef=64)"
    assert IndexState("FLAT", {}, {}).describe() == "FLAT"
