"""Searches with the cached row validity return exactly what milvus-lite's own per-row loops return,
through inserts, upserts, deletes (pending and flushed), flushes and compactions."""

import random

import numpy as np
import pytest
from milvus_lite.db import MilvusLite
from milvus_lite.engine import collection as engine
from milvus_lite.schema.types import CollectionSchema, DataType, FieldSchema, Function, FunctionType

from gateway.storage import bulk, lite_validity

DIM = 8
WORDS = "refund invoice outage status region payment week monthly café term".split()


def _schema() -> CollectionSchema:
    return CollectionSchema(
        fields=[FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=32),
                FieldSchema("text", DataType.VARCHAR, max_length=400, enable_analyzer=True),
                FieldSchema("tag", DataType.INT64),
                FieldSchema("sparse", DataType.SPARSE_FLOAT_VECTOR, is_function_output=True),
                FieldSchema("dense", DataType.FLOAT_VECTOR, dim=DIM)],
        functions=[Function("bm25", FunctionType.BM25, ["text"], ["sparse"])])


def _row(rng: random.Random, pk: str) -> dict:
    return {"id": pk, "text": " ".join(rng.choices(WORDS, k=rng.randint(1, 8))), "tag": rng.randint(0, 5),
            "dense": [rng.gauss(0, 1) for _ in range(DIM)]}


class WriteHistory:
    """A random write history of an engine collection with partitions `_default` and `p1`, one
    operation a `step()`: inserts of new keys, upserts of existing ones (deleted ones come back;
    with `move`, that share of them changes partition), deletes (in a partition picked from
    `delete_in` when given) and flushes with the background work they start (compactions, tombstone
    GC). `row(rng, pk)` makes a row; keys are `key.format(n)` for n = 0, 1, ..."""

    def __init__(self, col, rng: random.Random, row=None, *, ops: tuple[str, ...], rows: tuple[int, int] = (5, 40),
                 key: str = "k{}", move: float = 0.0, delete_in: tuple[str | None, ...] = ()) -> None:
        self.col, self.rng, self.row, self.ops, self.rows = col, rng, row or _row, ops, rows
        self.key, self.move, self.delete_in = key, move, delete_in
        self.where: dict[str, str] = {}  # every key ever written -> its partition
        self.live: set[str] = set()
        self.flushes = 0

    def step(self) -> str:
        col, rng = self.col, self.rng
        op = rng.choice(self.ops)
        if op == "insert" or not self.live:
            first = len(self.where)
            rows = [self.row(rng, self.key.format(first + i)) for i in range(rng.randint(*self.rows))]
            partition = rng.choice(["_default", "p1"])
            col.insert(rows, partition_name=partition)
            self.where.update((r["id"], partition) for r in rows)
            self.live.update(r["id"] for r in rows)
        elif op == "upsert":
            pks = rng.sample(sorted(self.where), min(len(self.where), rng.randint(1, 25)))
            for pk in pks if self.move else ():
                if rng.random() < self.move:
                    self.where[pk] = "p1" if self.where[pk] == "_default" else "_default"
            for partition in ("_default", "p1"):
                rows = [self.row(rng, pk) for pk in pks if self.where[pk] == partition]
                if rows:
                    col.upsert(rows, partition_name=partition)
            self.live.update(pks)
        elif op == "delete":
            pks = rng.sample(sorted(self.live), min(len(self.live), rng.randint(1, 15)))
            if self.delete_in:
                col.delete(pks, partition_name=rng.choice(self.delete_in))
            else:
                col.delete(pks)
            self.live.difference_update(pks)
        else:
            col.flush()
            self.flushes += 1
            col._wait_for_bg()  # the background compaction (4 files in a bucket) and tombstone GC
        return op


def _searches(col, rng: random.Random) -> list:
    """Dense and BM25 searches, plain, filtered and in one partition, with several projections (keys only too)."""
    queries = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(2)]
    texts = [" ".join(rng.choices(WORDS, k=3)) for _ in range(2)]
    out = []
    for expr in (None, "tag >= 3"):
        for partitions in (None, ["p1"]):
            fields = rng.choice((["text", "tag"], ["id"], ["tag", "dense"]))  # a dense hit reads only these columns
            out.append(col.search(queries, top_k=15, expr=expr, partition_names=partitions, output_fields=fields))
            out.append(col.search(texts, top_k=15, anns_field="sparse", expr=expr, partition_names=partitions,
                                  output_fields=rng.choice((["text", "tag"], ["id"]))))  # keys only: no row read
    return out


def _original(col, monkeypatch, searches):
    """`searches()` run by the engine's own functions."""
    with monkeypatch.context() as patch:
        patch.setattr(engine, "execute_search_with_index", lite_validity.original_dense)
        patch.setattr(engine.Collection, "_search_sparse", lite_validity.original_sparse)
        return searches()


def _original_searches(col, seed: int, monkeypatch) -> list:
    return _original(col, monkeypatch, lambda: _searches(col, random.Random(seed)))


@pytest.mark.parametrize(("seed", "index"), [(1, None), (2, None), (3, None), (4, "HNSW"), (5, "HNSW")])
def test_searches_match_the_engine_through_writes_deletes_flushes_and_compactions(tmp_path, monkeypatch, seed, index):
    assert bulk.patch_engine() and engine.execute_search_with_index is lite_validity.execute_search_with_index
    rng = random.Random(seed)
    db = MilvusLite(str(tmp_path / "db"))
    col = db.create_collection("c", _schema())
    col.create_partition("p1")
    if index is not None:  # the graph index the gateway switches to past its size threshold
        col.create_index("dense", {"index_type": index, "metric_type": "COSINE", "params": {"M": 8}})
        col.create_index("sparse", {"index_type": "SPARSE_INVERTED_INDEX", "metric_type": "BM25"})
        col.load()
    history = WriteHistory(col, rng, ops=("insert", "insert", "upsert", "upsert", "delete", "delete", "flush", "flush"),
                           move=0.2, delete_in=(None, None, "_default"))
    try:
        for step in range(45):
            op = history.step()
            search_seed = rng.randrange(1 << 30)
            got = _searches(col, random.Random(search_seed))
            want = _original_searches(col, search_seed, monkeypatch)
            assert got == want, f"step {step} ({op}) differs"
            assert any(hits for result in got for hits in result) or not history.live
        assert history.flushes >= 4 and len(col._segment_cache) >= 1
    finally:
        db.close()


def _flushed(tmp_path, rng: random.Random, rows: int):
    """A patched engine's collection holding `rows` rows in one flushed segment."""
    bulk.patch_engine()
    db = MilvusLite(str(tmp_path / "db"))
    col = db.create_collection("c", _schema())
    col.insert([_row(rng, f"k{i}") for i in range(rows)])
    col.flush()
    return db, col


def test_the_masks_are_built_once_per_segment_set_and_rebuilt_when_it_changes(tmp_path):
    db, col = _flushed(tmp_path, random.Random(7), 50)
    try:
        segments, delta = col._read_snapshot()
        first, _ = lite_validity.segment_masks(segments, delta._map)
        segments, delta = col._read_snapshot()
        assert lite_validity.segment_masks(segments, delta._map)[0] is first  # a new frozen copy, the same state
        col.delete(["k3"])
        col.flush()  # the tombstone reaches the delta index
        segments, delta = col._read_snapshot()
        again, _ = lite_validity.segment_masks(segments, delta._map)
        assert again is not first and not again[0][3] and int(np.count_nonzero(again[0])) == 49
    finally:
        db.close()


def _counted_filters(monkeypatch) -> list:
    """Each segment milvus-lite evaluates a filter over, from now on."""
    from milvus_lite.search import indexed_filter

    evaluated = []
    evaluate = indexed_filter.evaluate_segment_filter

    def counted(seg, compiled, plan):
        evaluated.append(id(seg))
        return evaluate(seg, compiled, plan)

    monkeypatch.setattr(indexed_filter, "evaluate_segment_filter", counted)
    return evaluated


def _filtered(col, expr: str) -> list:
    return [col.search([[0.5] * DIM], top_k=20, expr=expr, output_fields=["id"]),
            col.search(["refund invoice status"], top_k=20, anns_field="sparse", expr=expr, output_fields=["id"])]


def test_a_filter_is_evaluated_once_per_flushed_segment(tmp_path, monkeypatch):
    """A tenant's boundary is the same expression on every search: its mask over a flushed segment,
    which never changes, is kept; a new segment's is evaluated when it appears."""
    rng = random.Random(11)
    db, col = _flushed(tmp_path, rng, 40)
    try:
        col.insert([_row(rng, f"s{i}") for i in range(40)])
        col.flush()
        evaluated = _counted_filters(monkeypatch)
        first = _filtered(col, "tag >= 3")
        assert len(evaluated) == len(set(evaluated)) == 2  # the BM25 search reused the dense one's masks
        assert [_filtered(col, "tag >= 3") for _ in range(3)] == [first] * 3 and len(evaluated) == 2
        col.insert([_row(rng, f"n{i}") for i in range(30)])
        col.flush()
        col.delete(["k1", "s2"])
        got = _filtered(col, "tag >= 3")
        assert len(evaluated) == 3  # only the new segment's
        assert got == _original(col, monkeypatch, lambda: _filtered(col, "tag >= 3"))
        assert "k1" not in {hit["id"] for result in got for hits in result for hit in hits}
    finally:
        db.close()


def test_the_kept_filter_masks_stay_within_their_bound(tmp_path, monkeypatch):
    """Many tenants' boundaries and many filters: the masks kept stay within FILTER_MASK_BYTES, the
    least recently used out first, and a filter whose mask went out is evaluated again, correctly."""
    from gateway.storage.array_cache import ArrayCache

    db, col = _flushed(tmp_path, random.Random(12), 60)  # one segment: a 60-byte mask a filter
    monkeypatch.setattr(lite_validity, "_MASKS", ArrayCache(8 * 60))
    try:
        evaluated = _counted_filters(monkeypatch)
        filters = [f"tag >= {n % 6} and id != 'k{n}'" for n in range(12)]
        results = [_filtered(col, expr) for expr in filters]
        assert len(evaluated) == 12
        assert lite_validity._MASKS.bytes <= 8 * 60
        assert len(lite_validity._MASKS) == 8
        assert _filtered(col, filters[-1]) == results[-1] and len(evaluated) == 12  # still kept
        assert _filtered(col, filters[0]) == results[0] and len(evaluated) == 13  # went out first
        assert results == _original(col, monkeypatch, lambda: [_filtered(col, expr) for expr in filters])
    finally:
        db.close()


def test_a_search_for_keys_only_reads_no_row(tmp_path, monkeypatch):
    """The gateway's first pass asks for keys only: dense and BM25 hits come from the candidates' keys,
    with no row read or projected (each cost the store a retrieval per candidate)."""
    from milvus_lite.engine import projection

    rng = random.Random(9)
    db, col = _flushed(tmp_path, rng, 60)
    try:
        col.insert([_row(rng, f"m{i}") for i in range(10)])  # unflushed: memtable rows too
        query, text = [[rng.gauss(0, 1) for _ in range(DIM)]], ["refund invoice status"]
        want = [col.search(query, top_k=20, output_fields=["id"]),
                col.search(text, top_k=20, anns_field="sparse", output_fields=["id"])]

        def no_rows(*args, **kwargs):
            raise AssertionError("a search for keys read a row")

        monkeypatch.setattr(lite_validity, "segment_row", no_rows)
        monkeypatch.setattr(projection, "project_record", no_rows)
        monkeypatch.setattr(col._memtable, "materialize_row", no_rows)
        got = [col.search(query, top_k=20, output_fields=["id"]),
               col.search(text, top_k=20, anns_field="sparse", output_fields=["id"])]
        assert got == want and all(hit["entity"] == {} for result in got for hits in result for hit in hits)
        assert {hit["id"][0] for hit in got[0][0]} == {"k", "m"}
    finally:
        db.close()
