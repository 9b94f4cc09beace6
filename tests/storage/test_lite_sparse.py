"""The array-backed BM25 index returns what milvus-lite's own SparseInvertedIndex returns: on random
corpora (frequent and rare terms, empty documents, build and search masks), from the stored column,
after save and load, and through a collection's inserts, upserts, deletes, flushes and compactions."""

import random

import numpy as np
import pyarrow as pa
import pytest
from milvus_lite.analyzer.sparse import sparse_to_bytes
from milvus_lite.db import MilvusLite
from milvus_lite.engine import collection as engine
from milvus_lite.index import sparse_factory
from milvus_lite.index.sparse_inverted import SparseInvertedIndex
from milvus_lite.schema.types import CollectionSchema, DataType, FieldSchema, Function, FunctionType

from gateway.storage import bulk, lite_sparse, lite_validity
from gateway.storage.lite_sparse import ArrayInvertedIndex
from tests.storage.test_lite_validity import WriteHistory

VOCABULARY = 400


def _zipf_terms(rng: random.Random, k: int) -> list[int]:
    """Term hashes with Zipf-like frequencies: a few in most documents, most in very few."""
    return [rank * 2_654_435_761 % (1 << 32) for rank in
            rng.choices(range(VOCABULARY), weights=[1 / (r + 1) for r in range(VOCABULARY)], k=k)]


def _corpus(rng: random.Random, size: int) -> list[dict[int, float]]:
    docs = []
    for _ in range(size):
        doc: dict[int, float] = {}
        for term in _zipf_terms(rng, 0 if rng.random() < 0.08 else rng.randint(1, 40)):
            doc[term] = doc.get(term, 0.0) + 1.0
        docs.append(doc)
    return docs


def _queries(rng: random.Random) -> list[dict[int, float]]:
    queries = [{term: float(rng.randint(1, 3)) for term in _zipf_terms(rng, rng.randint(1, 8))} for _ in range(25)]
    return queries + [{}, {12345: 1.0}]  # no terms; a term no document has


def _mask(rng: random.Random, size: int, keep: float) -> np.ndarray:
    return np.array([rng.random() < keep for _ in range(size)])


def _assert_same(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    assert got[0].dtype == want[0].dtype and got[1].dtype == want[1].dtype
    assert got[0].tolist() == want[0].tolist()  # same rows in the same order, ties included
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4)
    assert np.array_equal(got[1], want[1])  # the engine's float32 arithmetic, operation for operation


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_same_rows_and_scores_as_the_engine_on_random_corpora(seed):
    rng = random.Random(seed)
    size = rng.choice([1, 7, 300, 2000])
    docs = _corpus(rng, size)
    for build_mask in (None, _mask(rng, size, 0.8)):
        want = SparseInvertedIndex(k1=1.2, b=0.6) if seed % 2 else SparseInvertedIndex()
        got = ArrayInvertedIndex(k1=want.k1, b=want.b)
        want.build(docs, build_mask)
        got.build(docs, build_mask)
        assert (got.doc_count, got.avgdl) == (want.doc_count, want.avgdl)
        assert got._df == want._df and got._posting_lists == want._posting_lists
        queries = _queries(rng)
        for search_mask in (None, _mask(rng, size, 0.6), np.zeros(size, dtype=bool)):
            for k in (0, 1, 10, size + 5):  # more than there are rows: padded with -1 and inf
                _assert_same(got.search(queries, k, search_mask), want.search(queries, k, search_mask))


def test_many_rows_tied_at_the_kth_score_keep_the_engine_order():
    # Terms 1 and 3 are equally frequent in equally long rows: every row either reaches scores the same.
    docs = [{1: 1.0}] * 50 + [{3: 1.0}] * 50 + [{1: 1.0, 2: 1.0}] * 20 + [{2: 1.0, 3: 1.0}] * 20 + [{}] * 5
    want, got = SparseInvertedIndex(), ArrayInvertedIndex()
    want.build(docs)
    got.build(docs)
    queries = [{3: 1.0, 1: 1.0}, {2: 1.0, 1: 1.0, 3: 1.0}]  # the engine lists rows term 3 reached first first
    for k in (1, 10, 49, 50, 51, 99, 100, 101, 160):
        _assert_same(got.search(queries, k), want.search(queries, k))


def test_rows_a_term_reaches_with_nothing_to_add_are_listed_as_the_engine_lists_them():
    docs = [{1: 1.0, 2: 0.0}, {2: 0.0}, {1: 2.0}, {3: 1.0}, {2: 0.0, 3: 2.0}]  # a stored weight of 0
    want, got = SparseInvertedIndex(), ArrayInvertedIndex()
    want.build(docs)
    got.build(docs)
    queries = [{1: 1.0, 2: 1.0}, {2: 1.0}, {3: 1.0, 2: 1.0}, {1: 0.0, 3: 1.0}, {1: 0.0}]  # ... or asked with 0
    for k in (1, 2, 5):
        _assert_same(got.search(queries, k), want.search(queries, k))
    assert got.search([{2: 1.0}], 5)[0].tolist() == [[0, 1, 4, -1, -1]]  # score 0, distance 0: still hits


def test_building_from_the_stored_column_equals_building_from_dicts():
    rng = random.Random(9)
    docs = _corpus(rng, 600)
    cells = [sparse_to_bytes(d) for d in docs]
    cells[5] = None  # a null cell reads as an empty vector, as the engine's `r or {}`
    docs[5] = {}
    chunked = pa.chunked_array([pa.array(cells[:250], pa.binary()), pa.array(cells[250:], pa.binary())])
    sliced = pa.array(cells, pa.large_binary()).slice(100, 400)  # an Arrow slice: offsets start mid-buffer
    queries = _queries(rng)
    for stored, rows in ((chunked, docs), (sliced, docs[100:500])):
        want = SparseInvertedIndex()
        want.build(rows)
        got = ArrayInvertedIndex()
        got.build_column(stored)
        assert (got.doc_count, got.avgdl) == (want.doc_count, want.avgdl)
        _assert_same(got.search(queries, 20), want.search(queries, 20))


def test_a_column_it_cannot_read_as_pairs_goes_through_the_engine_decoding():
    repeated = np.array([(7, 1.0), (7, 2.0)], dtype=[("t", "<u4"), ("v", "<f4")]).tobytes()  # the dict keeps 2.0
    column = pa.array([repeated, sparse_to_bytes({7: 1.0, 9: 3.0})], pa.binary())
    want = SparseInvertedIndex()
    want.build([{7: 2.0}, {7: 1.0, 9: 3.0}])
    got = ArrayInvertedIndex()
    got.build_column(column)
    _assert_same(got.search([{7: 1.0}, {9: 1.0}], 2), want.search([{7: 1.0}, {9: 1.0}], 2))


def test_save_and_load_read_and_write_the_engine_file(tmp_path):
    rng = random.Random(4)
    docs = _corpus(rng, 200)
    queries = _queries(rng)
    engine_index, array_index = SparseInvertedIndex(), ArrayInvertedIndex()
    engine_index.build(docs)
    array_index.build(docs)
    array_index.save(str(tmp_path / "array.json"))
    engine_index.save(str(tmp_path / "engine.json"))
    want = engine_index.search(queries, 15)
    _assert_same(SparseInvertedIndex.load(str(tmp_path / "array.json")).search(queries, 15), want)
    _assert_same(ArrayInvertedIndex.load(str(tmp_path / "engine.json")).search(queries, 15), want)


WORDS = [f"w{i}" for i in range(120)]


def _schema() -> CollectionSchema:
    return CollectionSchema(
        fields=[FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=32),
                FieldSchema("text", DataType.VARCHAR, max_length=2000, enable_analyzer=True),
                FieldSchema("tag", DataType.INT64),
                FieldSchema("sparse", DataType.SPARSE_FLOAT_VECTOR, is_function_output=True),
                FieldSchema("dense", DataType.FLOAT_VECTOR, dim=4)],
        functions=[Function("bm25", FunctionType.BM25, ["text"], ["sparse"])], enable_dynamic_field=True)


def _row(rng: random.Random, pk: str) -> dict:
    words = rng.choices(WORDS, weights=[1 / (r + 1) for r in range(len(WORDS))], k=rng.choice([0, 3, 12, 40]))
    row = {"id": pk, "text": " ".join(words), "tag": rng.randint(0, 5), "dense": [rng.random() for _ in range(4)]}
    if rng.random() < 0.5:
        row["extra"] = rng.randint(0, 9)  # a dynamic field
    return row


def _bm25_searches(col, rng: random.Random) -> list:
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 5))) for _ in range(3)]
    return [col.search(texts, top_k=top_k, anns_field="sparse", expr=expr, partition_names=partitions,
                       output_fields=fields)
            for top_k, expr, partitions, fields in ((10, None, None, ["text", "tag"]), (40, "tag >= 3", None, None),
                                                    (5, None, ["p1"], ["text", "extra"]), (5, None, None, ["*"]))]


def _forget_segment_indexes(col) -> None:
    for seg in col._read_snapshot()[0]:
        seg.sparse_indexes.clear()


def _engine_searches(col, seed: int, monkeypatch) -> list:
    with monkeypatch.context() as patch:
        patch.setattr(sparse_factory, "SparseInvertedIndex", lite_sparse.original)
        patch.setattr(engine.Collection, "_search_sparse", lite_validity.original_sparse)
        _forget_segment_indexes(col)
        try:
            return _bm25_searches(col, random.Random(seed))
        finally:
            _forget_segment_indexes(col)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_bm25_searches_match_the_engine_through_writes_deletes_flushes_and_compactions(tmp_path, monkeypatch, seed):
    assert bulk.patch_engine() and sparse_factory.SparseInvertedIndex is ArrayInvertedIndex
    rng = random.Random(seed)
    db = MilvusLite(str(tmp_path / "db"))
    col = db.create_collection("c", _schema())
    col.create_partition("p1")
    history = WriteHistory(col, rng, _row, ops=("insert", "insert", "upsert", "delete", "flush", "flush"), rows=(10, 60))
    try:
        for step in range(30):
            op = history.step()
            search_seed = rng.randrange(1 << 30)
            got = _bm25_searches(col, random.Random(search_seed))
            segments = col._read_snapshot()[0]
            assert all(isinstance(seg.sparse_indexes["sparse"], ArrayInvertedIndex)
                       for seg in segments if seg.num_rows)
            want = _engine_searches(col, search_seed, monkeypatch)
            assert got == want, f"step {step} ({op}) differs"
            assert any(hits for result in got for hits in result) or not history.live
        assert history.flushes >= 3 and len(col._segment_cache) >= 1
    finally:
        db.close()
