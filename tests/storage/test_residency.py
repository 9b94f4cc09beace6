"""Idle collections are released from the engine's memory and come back on their next search."""

import pytest

from gateway.storage.milvus import MilvusStore
from gateway.storage.residency import Residency, loads_recorded
from gateway.storage.schema import Scope
from tests.storage.test_milvus import TEXTS, _records


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_only_collections_unused_for_the_idle_time_are_listed():
    clock = Clock()
    residency = Residency(clock)
    residency.touch("a", ("a", "a_parents"))
    clock.now += 50
    residency.touch("b", ("b", "b_parents"))
    clock.now += 20
    assert residency.idle(60) == [("a", ("a", "a_parents"))]
    assert residency.still_idle("a", 60) and not residency.still_idle("b", 60)
    residency.forget("a")
    assert residency.idle(60) == [] and len(residency) == 1


@pytest.mark.server
def test_an_idle_collection_is_released_and_its_next_search_loads_it_again_in_any_process(milvus_server, embedder):
    first, second = MilvusStore(milvus_server), MilvusStore(milvus_server)
    scope, busy = Scope("acme", "docs", "residency"), Scope("acme", "docs", "residency_busy")
    try:
        for each in (scope, busy):
            first.drop(each)
            first.ensure(each)
            first.upsert_chunks(each, _records(embedder, TEXTS))
        vector = embedder.embed_query("how do I get my money back")
        before = [h.chunk.source_id for h in first.search_dense(scope, vector, 3)]
        assert [h.chunk.source_id for h in second.search_dense(scope, vector, 3)] == before
        first.search_sparse(busy, "refunds", 3)
        # Nothing is idle for an hour yet; everything this process searched is idle for 0 s.
        assert first.release_idle(3600) == []
        released = first.release_idle(0)
        assert set(released) == {first.physical(scope).chunks, first.physical(busy).chunks}
        assert not first.is_loaded(scope)
        with loads_recorded() as loads:
            again = [h.chunk.source_id for h in first.search_dense(scope, vector, 3)]
        assert again == before
        assert [load.collection for load in loads] == [first.physical(scope).chunks] and loads[0].seconds >= 0
        with loads_recorded() as loads:
            first.search_dense(scope, vector, 3)
        assert loads == []  # loaded now: nothing to say
        # The other process still thinks it loaded; its search loads the collection again.
        first.release_idle(0)
        assert [h.chunk.source_id for h in second.search_dense(scope, vector, 3)] == before
    finally:
        for each in (scope, busy):
            first.drop(each)
        first.close()
        second.close()


def test_a_shared_collection_is_never_released_for_one_tenants_idleness(tmp_path, embedder):
    from gateway.storage.schema import Isolation, Layout

    shared = MilvusStore(str(tmp_path / "gateway.db"), layout=Layout.of([("acme", Isolation.PARTITION_KEY)]))
    try:
        scope = Scope("acme", "docs", "residency_shared")
        shared.ensure(scope)
        shared.upsert_chunks(scope, _records(embedder, TEXTS))
        assert shared.search_sparse(scope, "refunds", 3)
        assert shared.release_idle(0) == [] and shared.is_loaded(scope)
    finally:
        shared.close()


def test_a_dropped_collection_is_forgotten(lite_store, embedder):
    scope = Scope("acme", "docs", "residency_lite")
    lite_store.drop(scope)
    lite_store.ensure(scope)
    lite_store.upsert_chunks(scope, _records(embedder, TEXTS))
    lite_store.search_sparse(scope, "refunds", 3)
    assert lite_store.physical(scope).chunks in dict(lite_store.residency.idle(0))
    lite_store.drop(scope)
    assert lite_store.physical(scope).chunks not in dict(lite_store.residency.idle(0))
