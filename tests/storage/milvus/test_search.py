"""A BM25 search sent ahead of the query's embedding (`sparse_later`) answers as `search_sparse` does,
and one that fails in flight runs again the ordinary way."""

import threading
from collections.abc import Iterator

import pytest
from pymilvus import MilvusException

from gateway.errors import StorageUnavailable
from gateway.storage.milvus import ChunkRecord, MilvusStore
from gateway.storage.schema import Scope

SCOPE = Scope("acme", "docs", "later")
TEXTS = ["Refunds for a Team subscription are prorated to the day.",
         "Deleted files stay in the trash for thirty days before they are purged.",
         "Data at rest is encrypted with AES-256; keys rotate every ninety days.",
         "Rotate an API key from the console; the old key works for one more hour.",
         "Requests over the rate limit get HTTP 429 with a Retry-After header.",
         "Refunds of damaged goods need a photo of the damage within a week."]
QUERIES = ["how are refunds prorated", "rotate API key", "encrypted keys", "trash purge days"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[MilvusStore]:
    store = MilvusStore(str(tmp_path_factory.mktemp("later") / "gateway.db"))
    vectors = embedder.embed_documents(TEXTS)
    store.ensure(SCOPE)
    store.upsert_chunks(SCOPE, [
        ChunkRecord(source_id=f"doc-{n}", chunk_id="0", parent_key="", text=text, title="", content_hash=f"h{n}",
                    created_at=1, updated_at=1, dense=vector)
        for n, (text, vector) in enumerate(zip(TEXTS, vectors, strict=True))])
    yield store
    store.close()


def _ranked(rows) -> list[tuple[str, str, float, str | None]]:
    return [(row.source_id, row.chunk_id, round(row.score, 5), row.chunk.text) for row in rows]


@pytest.mark.parametrize("fields", [None, frozenset(), frozenset({"text"})])
def test_a_bm25_search_sent_ahead_ranks_as_one_waited_for(store, fields):
    for query in QUERIES:
        expected = store.search_sparse(SCOPE, query, 5, None, fields)
        assert expected, query
        assert _ranked(store.sparse_later(SCOPE, query, 5, None, fields)()) == _ranked(expected)
    # Words the collection never saw: nothing is sent, nothing is found.
    assert store.sparse_later(SCOPE, "the of and", 5)() == []


def test_a_search_sent_ahead_that_fails_in_flight_runs_again_and_answers(store):
    expected = _ranked(store.search_sparse(SCOPE, QUERIES[0], 5))
    name = store.physical(SCOPE).chunks
    store.guard.release_collection(name)
    # The engine refuses a released collection, and the store still believes it loaded: a search sent
    # ahead fails in flight, and the ordinary call after it loads the collection again.
    pending = store.guard.search(name, data=[store.analyzer.analyse(QUERIES[0])], anns_field="sparse", limit=5,
                                 search_params={"metric_type": "BM25"}, _async=True)
    with pytest.raises(MilvusException, match="(?i)not loaded|released"):
        pending.result()
    assert _ranked(store.sparse_later(SCOPE, QUERIES[0], 5)()) == expected


def test_searches_sent_ahead_one_after_another_start_no_thread_each(store, monkeypatch):
    """gRPC starts a thread to poll a channel for a future with none other in flight, and ends it
    with the call; the store waits on its own kept threads instead."""
    store.sparse_later(SCOPE, QUERIES[0], 5)()  # the first may start the store's thread
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        # The embedded engine's gRPC server runs in this process and takes threads from its own pool as it likes.
        if not thread.name.startswith("ThreadPoolExecutor-"):
            started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    for query in QUERIES:
        assert store.sparse_later(SCOPE, query, 5)()
    assert started == []


def test_a_search_sent_ahead_after_the_store_closed_says_why(tmp_path):
    store = MilvusStore(str(tmp_path / "gateway.db"))
    store.ensure(SCOPE)
    store.close()
    with pytest.raises(StorageUnavailable, match="storage failed during search"):
        store.sparse_later(SCOPE, QUERIES[0], 5)()
