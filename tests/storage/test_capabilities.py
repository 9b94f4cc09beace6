"""Capability detection from the engine's version, and the refusals it leads to."""

import pytest

from gateway.storage.capabilities import Engine, capability_problems, detect, lite_capabilities
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Isolation


@pytest.mark.parametrize("version", ["milvus_lite-3.2.2", "milvus-lite 3.2.2"])
def test_milvus_lite_is_recognised(version):
    caps = detect(version)
    assert caps.engine == Engine.MILVUS_LITE and caps.is_lite
    assert (caps.dense_index, caps.partition_key, caps.bm25, caps.float16_vectors) == ("FLAT", False, True, False)


@pytest.mark.parametrize("version, bm25, partition_key, float16", [
    ("v2.5.4", True, True, True),
    ("2.6.0-rc1", True, True, True),
    ("v2.4.13-hotfix", False, True, True),
    ("v2.2.8", False, False, False),
])
def test_server_features_follow_the_release(version, bm25, partition_key, float16):
    caps = detect(version)
    assert caps.engine == Engine.MILVUS and caps.dense_index == "HNSW" and caps.known_release
    assert (caps.bm25, caps.partition_key, caps.float16_vectors) == (bm25, partition_key, float16)


def test_a_version_naming_no_release_is_trusted_and_flagged():
    caps = detect("Zilliz Cloud Vector Database")
    assert caps.bm25 and caps.partition_key and not caps.known_release


def test_partition_key_on_milvus_lite_is_refused_naming_tenant_setting_and_choices():
    problems = capability_problems(lite_capabilities("milvus_lite-3.2.2"),
                                   {"acme": Isolation.PARTITION_KEY, "globex": Isolation.COLLECTION},
                                   uri="./data/gateway.db")
    assert len(problems) == 1
    assert "tenant 'acme' sets isolation: partition_key" in problems[0]
    assert "'./data/gateway.db' is milvus-lite (milvus_lite-3.2.2)" in problems[0]
    assert "Allowed here: isolation: collection" in problems[0]


def test_a_server_without_bm25_is_refused_whatever_the_tenants():
    problems = capability_problems(detect("v2.4.13"), {"acme": Isolation.COLLECTION}, uri="http://milvus:19530")
    assert problems == ["the Milvus server at 'http://milvus:19530' is v2.4.13; every collection has a BM25 "
                        "function, which needs Milvus 2.5.0 or later: upgrade the server"]


def test_a_recent_server_accepts_partition_key_tenants():
    assert capability_problems(detect("v2.5.4"), {"acme": Isolation.PARTITION_KEY}, uri="http://m:19530") == []


@pytest.mark.parametrize("where", ["embedded", pytest.param("server", marks=pytest.mark.server)])
def test_detected_on_the_real_engines(where, request, tmp_path):
    # The `milvus-lite server` behind a URI is still milvus-lite, and is treated as such.
    uri = str(tmp_path / "caps.db") if where == "embedded" else request.getfixturevalue("milvus_server")
    store = MilvusStore(uri, dim=4)
    try:
        caps = store.capabilities
        assert caps.is_lite and caps.version.startswith("milvus_lite") and not caps.partition_key
        assert "milvus-lite milvus_lite-" in caps.describe() and "BM25" in caps.describe()
    finally:
        store.close()


def test_milvus_lite_builds_the_faiss_indexes_a_collection_may_name():
    assert lite_capabilities().index_types == ("FLAT", "HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8", "SPARSE_INVERTED_INDEX")
    assert capability_problems(lite_capabilities(), {}, uri="./g.db", indexes={"acme/docs/guides": "HNSW_SQ"}) == []


def test_an_index_the_server_does_not_build_is_refused_naming_collection_and_choices():
    assert "HNSW_SQ" in detect("v2.6.2").index_types
    problems = capability_problems(detect("v2.5.4"), {}, uri="http://m:19530", indexes={"acme/docs/guides": "HNSW_SQ"})
    assert problems == ["collection 'acme/docs/guides' sets index.dense: hnsw_sq, which milvus v2.5.4 at "
                        "'http://m:19530' does not build; allowed here: auto, flat, hnsw, ivf_flat, ivf_sq8"]
