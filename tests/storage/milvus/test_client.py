"""The lean keys-only search (StoreClient.search_keys) answers and fails as pymilvus's search does,
on a real milvus-lite store, and the store's searches take it only for keys on milvus-lite."""

from collections.abc import Iterator

import pytest
from pymilvus import MilvusException

from gateway.storage.milvus import ChunkRecord, MilvusStore
from gateway.storage.schema import Scope
from tests.storage.milvus.test_search import QUERIES, TEXTS

SCOPE = Scope("acme", "docs", "lean")
OTHER = Scope("globex", "docs", "lean")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[MilvusStore]:
    store = MilvusStore(str(tmp_path_factory.mktemp("lean") / "gateway.db"))
    vectors = embedder.embed_documents(TEXTS)
    for scope in (SCOPE, OTHER):
        store.ensure(scope)
        store.upsert_chunks(scope, [
            ChunkRecord(source_id=f"{scope.tenant}-{n}", chunk_id="0", parent_key="", text=text, title="",
                        content_hash=f"h{n}", created_at=1, updated_at=1, dense=vector)
            for n, (text, vector) in enumerate(zip(TEXTS, vectors, strict=True))])
    yield store
    store.close()


def _requests(store: MilvusStore, embedder, scope: Scope) -> list[dict]:
    boundary = store._boundary(scope, None)
    vectors = [embedder.embed_query(query).tolist() for query in QUERIES]
    dense = [{"data": [vector], "anns_field": "dense", "search_params": {"metric_type": "COSINE"}}
             for vector in vectors]
    sparse = [{"data": [store.analyzer.analyse(query)], "anns_field": "sparse", "search_params": {"metric_type": "BM25"}}
              for query in QUERIES]
    return [{**request, "limit": limit, "filter": where, "output_fields": ["id"]}
            for request in dense + sparse for limit in (1, 4, 50)
            for where in (boundary, f'{boundary} and source_id != "{scope.tenant}-0"')]


def test_keys_and_distances_are_those_of_pymilvus_search(store, embedder):
    name = store.physical(SCOPE).chunks
    for request in _requests(store, embedder, SCOPE):
        expected = store.guard.search(name, **request)[0]
        (hits,) = store.guard.search_keys(name, **request)
        assert list(hits.ids) == list(expected.ids), request
        assert list(hits.distances) == pytest.approx(list(expected.distances)), request
        assert len(hits) == len(expected) <= request["limit"]
        assert all(f"/{SCOPE.tenant}-" in key for key in hits.ids), request
        if "!=" in request["filter"]:
            assert not any(f"/{SCOPE.tenant}-0/" in key for key in hits.ids), request


def test_several_queries_are_split_as_pymilvus_splits_them(store, embedder):
    name = store.physical(SCOPE).chunks
    vectors = [embedder.embed_query(query).tolist() for query in QUERIES]
    request = {"data": vectors, "anns_field": "dense", "limit": 3, "filter": store._boundary(SCOPE, None),
               "output_fields": ["id"], "search_params": {"metric_type": "COSINE"}}
    assert [list(hits.ids) for hits in store.guard.search_keys(name, **request)] \
        == [list(hits.ids) for hits in store.guard.search(name, **request)]


def test_a_refusal_is_the_milvus_exception_search_raises(store, embedder):
    name = store.physical(SCOPE).chunks
    request = {**_requests(store, embedder, SCOPE)[0], "filter": "no_such_field == 1"}
    with pytest.raises(MilvusException) as expected:
        store.guard.search(name, **request)
    with pytest.raises(MilvusException) as lean:
        store.guard.search_keys(name, **request)
    assert (lean.value.code, lean.value.message) == (expected.value.code, expected.value.message)


def test_it_fetches_keys_alone(store, embedder):
    request = {**_requests(store, embedder, SCOPE)[0], "output_fields": ["id", "text"]}
    with pytest.raises(ValueError, match="primary key alone"):
        store.guard.search_keys(store.physical(SCOPE).chunks, **request)


def test_the_stores_keys_only_searches_answer_as_through_pymilvus(store, embedder, monkeypatch):
    def ranked(scope: Scope) -> list:
        rows = []
        for query in QUERIES:
            vector = embedder.embed_query(query)
            rows.append([(hit.source_id, round(hit.score, 5))
                         for hit in store.search_dense(scope, vector, 4, None, frozenset())])
            rows.append([(hit.source_id, round(hit.score, 5))
                         for hit in store.search_sparse(scope, query, 4, None, frozenset())])
            rows.append([(hit.source_id, round(hit.score, 5))
                         for hit in store.sparse_later(scope, query, 4, None, frozenset())()])
        return rows

    calls: list[str] = []
    lean = type(store.guard.raw).search_keys
    monkeypatch.setattr(type(store.guard.raw), "search_keys",
                        lambda self, *a, **k: calls.append("lean") or lean(self, *a, **k))
    answers = {scope: ranked(scope) for scope in (SCOPE, OTHER)}
    assert len(calls) == 3 * len(QUERIES) * 2
    monkeypatch.setattr(store, "_lite", False)  # as on a Milvus server: pymilvus's search
    assert {scope: ranked(scope) for scope in (SCOPE, OTHER)} == answers
    assert len(calls) == 3 * len(QUERIES) * 2
    assert all(source.startswith("globex-") for rows in answers[OTHER] for source, _ in rows)


def test_a_search_for_more_than_keys_takes_pymilvus_search(store, embedder, monkeypatch):
    monkeypatch.setattr(type(store.guard.raw), "search_keys", lambda *a, **k: pytest.fail("lean call for fields"))
    hits = store.search_dense(SCOPE, embedder.embed_query(QUERIES[0]), 2, None, frozenset({"text"}))
    assert [hit.chunk.text for hit in hits][0] == TEXTS[0]


def test_a_released_collection_is_loaded_again_and_the_search_answers(store, embedder):
    vector = embedder.embed_query(QUERIES[1])
    expected = [(hit.source_id, hit.score) for hit in store.search_dense(SCOPE, vector, 3, None, frozenset())]
    store.guard.release_collection(store.physical(SCOPE).chunks)
    assert [(hit.source_id, hit.score) for hit in store.search_dense(SCOPE, vector, 3, None, frozenset())] == expected


def test_on_a_collection_with_a_modality_column_a_search_for_identities_fetches_the_key_alone(store, embedder,
                                                                                              monkeypatch):
    name = store.physical(SCOPE).chunks
    assert name in store._modal  # every collection created since the column exists has it
    sent: list[list[str]] = []
    for method in ("search", "search_keys"):
        original = getattr(type(store.guard.raw), method)
        monkeypatch.setattr(type(store.guard.raw), method, lambda self, *a, _o=original, **k:
                            sent.append(k["output_fields"]) or _o(self, *a, **k))
    vector = embedder.embed_query(QUERIES[0])
    store.search_dense(SCOPE, vector, 3, None, frozenset())
    store.search_sparse(SCOPE, QUERIES[0], 3, None, frozenset({"chunk_id"}))
    (hit,) = store.search_dense(SCOPE, vector, 1, None, frozenset({"modality"}))
    assert sent == [["id"], ["id"], ["id", "tenant", "namespace", "source_id", "chunk_id", "modality"]]
    assert hit.chunk.modality == "text"
