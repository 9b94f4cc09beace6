"""MilvusStore.rebuild: BM25 statistics forget deleted rows, on milvus-lite and on a server."""

import pytest

from gateway.storage.milvus import ChunkRecord
from gateway.storage.schema import Scope

KEEP = {"target": "Aspirin lowers the risk of a second heart attack in adults."}
# Many deleted rows that mention aspirin change its document frequency and the average length.
FILLER = {f"f{i}": f"Aspirin aspirin aspirin trial {i} of many long filler words about dosing and more words"
          for i in range(40)}


@pytest.fixture(params=["embedded", pytest.param("server", marks=pytest.mark.server)])
def store(request, lite_store):
    return lite_store if request.param == "embedded" else request.getfixturevalue("server_store")


def _records(embedder, texts):
    vectors = embedder.embed_documents(list(texts.values()))
    return [ChunkRecord(source_id=sid, chunk_id="0", parent_key=f"{sid}#p0", text=text, title=sid,
                        content_hash=f"h-{sid}", created_at=1, updated_at=2, dense=vec,
                        metadata={"n": index}, index_text=text)
            for index, ((sid, text), vec) in enumerate(zip(texts.items(), vectors))]


def test_rebuild_makes_bm25_match_a_fresh_build_and_keeps_every_row(store, embedder):
    churned, fresh = Scope("acme", "docs", "churned"), Scope("acme", "docs", "fresh")
    for scope in (churned, fresh):
        store.drop(scope)
        store.ensure(scope)
    store.upsert_chunks(churned, _records(embedder, {**KEEP, **FILLER}))
    store.delete_chunks(churned, [f"docs/{sid}/0" for sid in FILLER])
    store.upsert_chunks(fresh, _records(embedder, KEEP))

    def bm25(scope):
        [hit] = store.search_sparse(scope, "aspirin heart attack", 5)
        return hit.chunk.source_id, hit.score

    before, expected = bm25(churned), bm25(fresh)
    assert store.rebuild(churned) == 1
    after = bm25(churned)
    assert after[0] == "target" and after[1] == pytest.approx(expected[1], rel=1e-4)
    if store.capabilities.engine == "milvus-lite":
        assert before[1] != pytest.approx(expected[1], rel=1e-3)  # the drift the rebuild removes
    [chunk] = store.source_chunks(churned, "target")
    assert (chunk.text, chunk.metadata, chunk.created_at, chunk.updated_at) == (KEEP["target"], {"n": 0}, 1, 2)
    dense = store.search_dense(churned, embedder.embed_query("aspirin and heart attacks"), 3)
    assert [d.chunk.source_id for d in dense] == ["target"]
    assert not store._client.has_collection(f"{churned.chunk_collection}__rebuild")
    for scope in (churned, fresh):
        store.drop(scope)


def test_rebuild_reports_its_progress_page_by_page(store, embedder, monkeypatch):
    from gateway.storage.milvus import rebuild

    scope = Scope("acme", "docs", "paged")
    store.drop(scope)
    store.ensure(scope)
    store.upsert_chunks(scope, _records(embedder, FILLER))
    monkeypatch.setattr(rebuild, "ENGINE_BATCH", 16)  # 40 rows: pages of 16, 16 and 8
    heard: list[tuple[str, int]] = []
    assert store.rebuild(scope, on_rows=lambda step, rows: heard.append((step, rows))) == 40
    assert heard == [("copy", 16), ("copy", 32), ("copy", 40), ("rewrite", 16), ("rewrite", 32), ("rewrite", 40)]
    assert store.count(scope) == 40
    assert sorted(c.source_id for c in store.source_chunks(scope, "f7")) == ["f7"]
    store.drop(scope)
