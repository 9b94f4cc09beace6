"""A collection's dense index on milvus-lite: FLAT while small, HNSW past its threshold, switched while
searches run, and searching like exact search on a small real set (the demo corpora's paragraphs)."""

import threading
import time

import numpy as np
import pytest

from gateway.storage.indexes import DenseIndex, DenseIndexKind
from gateway.storage.milvus import ChunkRecord, MilvusStore
from gateway.storage.schema import Scope
from tests.conftest import ROOT


def _paragraphs(limit: int) -> list[tuple[str, str]]:
    found = []
    for path in sorted((ROOT / "tenants" / "corpora").rglob("*.md")):
        for n, block in enumerate(path.read_text(encoding="utf-8").split("\n\n")):
            if len(block.strip()) > 40:
                found.append((f"{path.parent.parent.name}-{path.stem}", f"{n}", block.strip()))
    return [(f"{source}/{chunk}", text) for source, chunk, text in found[:limit]]


QUERIES = ["How do refunds work for a Team subscription?", "How long are deleted files kept?",
           "Which algorithm encrypts data at rest?", "How do I rotate an API key?",
           "What happens when I exceed the rate limit?", "How do I set up single sign-on?",
           "Where can I see the status of an outage?", "How are damaged goods refunded?",
           "Which storage class is cheapest for archives?", "How do webhooks retry failed deliveries?"]


@pytest.fixture(scope="module")
def real(embedder) -> tuple[list[ChunkRecord], np.ndarray]:
    paragraphs = _paragraphs(120)
    vectors = embedder.embed_documents([text for _, text in paragraphs])
    records = [ChunkRecord(source_id=key.split("/")[0], chunk_id=key.split("/")[1], parent_key="", text=text,
                           title="", content_hash="h", created_at=1, updated_at=1, dense=vector)
               for (key, text), vector in zip(paragraphs, vectors, strict=True)]
    return records, np.stack([embedder.embed_query(q) for q in QUERIES])


def _top(store: MilvusStore, scope: Scope, vector: np.ndarray, limit: int = 10) -> list[tuple[str, str]]:
    return [(row.source_id, row.chunk_id) for row in store.search_dense(scope, vector, limit)]


def test_a_collection_past_its_threshold_gets_hnsw_and_finds_what_exact_search_finds(tmp_path, real):
    records, queries = real
    assert len(records) == 120
    store = MilvusStore(str(tmp_path / "g.db"))
    growing, exact = Scope("acme", "docs", "growing"), Scope("acme", "docs", "exact")
    store.ensure(growing, index=DenseIndex(auto_rows=100))
    store.ensure(exact, index=DenseIndex(kind=DenseIndexKind.FLAT))
    store.upsert_chunks(exact, records)
    store.upsert_chunks(growing, records[:60])
    assert store.dense_index(growing).index_type == "FLAT"
    store.upsert_chunks(growing, records[60:])
    index = store.dense_index(growing)
    assert (index.index_type, index.build, index.search) == ("HNSW", {"M": 16, "efConstruction": 200}, {"ef": 64})
    described = store.guard.describe_index(store.physical(growing).chunks, "dense")
    assert described["index_type"] == "HNSW" and described["indexed_rows"] == 120
    assert store.dense_index(exact).index_type == "FLAT"
    recalls = []
    for vector in queries:
        hnsw, flat = _top(store, growing, vector), _top(store, exact, vector)
        assert hnsw[0] == flat[0]
        recalls.append(len(set(hnsw) & set(flat)) / len(flat))
    assert np.mean(recalls) >= 0.95, recalls
    store.close()


def test_a_new_process_sees_the_index_the_collection_has(tmp_path, real):
    records, _ = real
    uri = str(tmp_path / "g.db")
    store = MilvusStore(uri)
    scope = Scope("acme", "docs", "reopened")
    store.ensure(scope, index=DenseIndex(auto_rows=50))
    store.upsert_chunks(scope, records[:60])
    store.close()
    reader = MilvusStore(uri)
    assert reader.dense_index(scope, cached=True) is None  # not opened yet: nothing asked of Milvus
    assert reader.open_existing(scope)
    assert reader.dense_index(scope, cached=True).index_type == "HNSW"
    reader.close()


@pytest.mark.parametrize("kind", [DenseIndexKind.HNSW_SQ, DenseIndexKind.IVF_FLAT, DenseIndexKind.IVF_SQ8])
def test_every_index_milvus_lite_builds_is_created_and_searched(tmp_path, real, kind):
    records, queries = real
    store = MilvusStore(str(tmp_path / "g.db"))
    scope, exact = Scope("acme", "docs", "named"), Scope("acme", "docs", "flat")
    store.ensure(scope, index=DenseIndex(kind=kind, nlist=8, nprobe=8))
    store.ensure(exact, index=DenseIndex(kind=DenseIndexKind.FLAT))
    store.upsert_chunks(scope, records)
    store.upsert_chunks(exact, records)
    assert store.dense_index(scope).index_type == kind.index_type
    # nprobe = nlist reads every list: the same hits as exact search (SQ8 and SQ may reorder near ties).
    for vector in queries:
        assert _top(store, scope, vector, 3)[0] == _top(store, exact, vector, 3)[0]
    store.close()


def test_changing_a_collections_index_keeps_it_searchable_throughout(tmp_path, real):
    records, queries = real
    store = MilvusStore(str(tmp_path / "g.db"))
    scope = Scope("acme", "docs", "served")
    store.ensure(scope, index=DenseIndex(kind=DenseIndexKind.FLAT))
    store.upsert_chunks(scope, records)
    expected = _top(store, scope, queries[0])
    failures: list[BaseException] = []
    results: list[list[tuple[str, str]]] = []
    switching = threading.Event()
    done = threading.Event()

    def search() -> None:
        switching.wait()
        while not done.is_set():
            try:
                results.append(_top(store, scope, queries[0]))
            except BaseException as exc:  # noqa: BLE001 - the test reports every failure
                failures.append(exc)
            time.sleep(0.02)  # a steady reader, not a flood that starves the engine's build on a busy machine

    searcher = threading.Thread(target=search)
    searcher.start()
    switching.set()
    for kind in (DenseIndexKind.HNSW, DenseIndexKind.IVF_FLAT, DenseIndexKind.FLAT):
        store.set_index_policy(scope, DenseIndex(kind=kind, nlist=4, nprobe=4))
        assert store.reconcile_index(scope).index_type == kind.index_type
    done.set()
    searcher.join()
    assert failures == []
    assert results and all(r[0] == expected[0] for r in results)
    store.close()


def test_a_search_passes_the_collections_tuning(tmp_path, real):
    records, _ = real
    store = MilvusStore(str(tmp_path / "g.db"))
    scope = Scope("acme", "docs", "tuned")
    store.ensure(scope, index=DenseIndex(kind=DenseIndexKind.HNSW, ef=32))
    name = store.physical(scope).chunks
    # milvus-lite ignores what an index does not read, so both go (right after another process's switch too).
    assert store.dense_search_params(name, 10) == {"ef": 32, "nprobe": 32}
    assert store.dense_search_params(name, 100) == {"ef": 100, "nprobe": 32}
    store.close()


def test_a_search_goes_as_deep_as_its_collections_rows_call_for_and_says_so(tmp_path, real, monkeypatch):
    """The default ef follows the collection's rows (indexes.EF_BY_ROWS): in the writer after each flush,
    in a reader as counted when it opens the collection; the engine gets that ef and the index reports it."""
    records, queries = real
    tiers = ((0, 16), (100, 48))
    uri = str(tmp_path / "g.db")
    store = MilvusStore(uri)
    scope = Scope("acme", "docs", "growing")
    store.ensure(scope, index=DenseIndex(kind=DenseIndexKind.HNSW, ef_by_rows=tiers))
    sent: list[dict] = []
    search = store.guard.search

    def recorded(name, **kwargs):
        sent.append(kwargs["search_params"])
        return search(name, **kwargs)

    monkeypatch.setattr(store.guard, "search", recorded)
    store.upsert_chunks(scope, records[:60])
    assert _top(store, scope, queries[0]) and sent[-1]["params"]["ef"] == 16
    assert store.dense_index(scope).search == {"ef": 16}
    store.upsert_chunks(scope, records[60:])
    assert _top(store, scope, queries[0]) and sent[-1]["params"]["ef"] == 48
    assert store.dense_index(scope, cached=True).describe() == "HNSW (M=16, efConstruction=200; ef=48)"
    assert _top(store, scope, queries[0], 60) and sent[-1]["params"]["ef"] == 60  # never fewer than the hits
    store.close()

    reader = MilvusStore(uri)
    reader.set_index_policy(scope, DenseIndex(kind=DenseIndexKind.HNSW, ef_by_rows=tiers))
    assert reader.dense_index(scope, cached=True) is None  # not opened yet: nothing asked of Milvus
    assert _top(reader, scope, queries[0])
    assert reader.dense_index(scope, cached=True).search == {"ef": 48}
    reader.set_index_policy(scope, DenseIndex(kind=DenseIndexKind.HNSW, ef=24, ef_by_rows=tiers))
    assert reader.dense_index(scope).search == {"ef": 24}  # the tenant file's ef, whatever the rows
    reader.close()


def test_auto_keeps_its_graph_when_the_collection_shrinks_and_a_named_flat_drops_it(tmp_path, real):
    records, _ = real
    store = MilvusStore(str(tmp_path / "g.db"))
    scope = Scope("acme", "docs", "shrinking")
    store.ensure(scope, index=DenseIndex(auto_rows=100))
    store.upsert_chunks(scope, records)
    store.delete_sources(scope, sorted({r.source_id for r in records})[:5])
    assert store.count(scope) < 100
    assert store.reconcile_index(scope).index_type == "HNSW"
    store.set_index_policy(scope, DenseIndex(kind=DenseIndexKind.FLAT))
    assert store.reconcile_index(scope).index_type == "FLAT"
    store.close()


def test_a_create_index_call_sent_again_after_the_first_built_it_completes_the_switch(tmp_path, real, monkeypatch):
    # pymilvus sends create_index again when the connection drops during a long build; the second
    # call fails with "index already exists" although the switch is done. It failed a bulk load.
    from pymilvus import MilvusException

    records, queries = real
    store = MilvusStore(str(tmp_path / "g.db"))
    scope = Scope("acme", "docs", "retried")
    store.ensure(scope, index=DenseIndex(auto_rows=50))
    store.upsert_chunks(scope, records[:40])
    client = store.guard
    real_create = client.create_index

    def create_then_refuse_the_repeat(*args, **kwargs):
        real_create(*args, **kwargs)
        raise MilvusException(code=35, message="index already exists for field 'dense'; call drop_index first")

    monkeypatch.setattr(client, "create_index", create_then_refuse_the_repeat)
    store.upsert_chunks(scope, records[40:])
    assert store.dense_index(scope).index_type == "HNSW"
    assert _top(store, scope, queries[0], 3)
    monkeypatch.setattr(client, "create_index", lambda *a, **k: (_ for _ in ()).throw(
        MilvusException(code=1, message="the build failed")))
    store.set_index_policy(scope, DenseIndex(kind=DenseIndexKind.IVF_FLAT))
    with pytest.raises(MilvusException, match="the build failed"):
        store.reconcile_index(scope)
    store.close()
