"""Queries, key-ordered (cursor pages) or not, with the cached row validity return exactly what milvus-lite's
own query returns, through inserts, upserts, deletes (pending and flushed), flushes and compactions."""

import random

from milvus_lite.db import MilvusLite
from milvus_lite.engine.collection import Collection
from milvus_lite.search import bitmap

from gateway.storage import bulk, lite_query
from tests.storage.test_lite_validity import WriteHistory, _row, _schema


def _pages(col, expr_base: str | None, fields, page: int, partitions=None) -> list[dict]:
    """Every matching row, paged by key as pymilvus's iterator (and MilvusStore._iterate) pages."""
    out, last = [], None
    while True:
        cursor = None if last is None else f'id > "{last}"'
        expr = " and ".join(f"({e})" for e in (expr_base, cursor) if e) or None
        rows = Collection.query(col, expr, output_fields=fields, limit=page, partition_names=partitions,
                                order_by_pk=True)
        out.extend(rows)
        if len(rows) < page:
            return out
        last = rows[-1]["id"]


def _original(col, *args, **kwargs):
    return lite_query.original_query(col, *args, **kwargs)


def _collection(tmp_path):
    """The engine patched, and a fresh collection with partitions `_default` and `p1`."""
    assert bulk.patch_engine() and Collection.query is lite_query.query and Collection.get is lite_query.get
    db = MilvusLite(str(tmp_path / "db"))
    col = db.create_collection("c", _schema())
    col.create_partition("p1")
    return db, col


def test_key_ordered_queries_match_the_engine_through_writes_deletes_flushes_and_compactions(tmp_path):
    rng = random.Random(11)
    db, col = _collection(tmp_path)
    history = WriteHistory(col, rng, ops=("insert", "insert", "upsert", "delete", "delete", "flush", "flush"),
                           key="k{:04d}")
    try:
        for step in range(40):
            op = history.step()
            for expr in (None, "tag >= 3"):
                for partitions in (None, ["p1"]):
                    for limit, offset, ordered in ((7, 0, True), (None, 0, True), (5, 3, True), (None, 0, False),
                                                   (6, 2, False)):
                        got = Collection.query(col, expr, output_fields=["text", "tag"], limit=limit, offset=offset,
                                               partition_names=partitions, order_by_pk=ordered)
                        want = _original(col, expr, output_fields=["text", "tag"], limit=limit, offset=offset,
                                         partition_names=partitions, order_by_pk=ordered)
                        assert got == want, f"step {step} ({op}) {expr} {partitions} {limit}/{offset} {ordered}"
                whole = Collection.query(col, expr, partition_names=partitions, limit=4, order_by_pk=True)
                assert whole == _original(col, expr, partition_names=partitions, limit=4, order_by_pk=True)
            assert [r["id"] for r in _pages(col, None, ["tag"], 9)] == sorted(history.live), f"step {step} ({op})"
    finally:
        db.close()


def test_paging_by_key_decides_row_validity_once_per_segment_set_not_per_page(tmp_path, monkeypatch):
    # The engine decided which rows are live row by row in Python on every page: a whole collection's
    # work per page, so reading a scope beside `gateway serve` grew with rows x pages.
    bulk.patch_engine()
    rng = random.Random(3)
    db = MilvusLite(str(tmp_path / "db"))
    col = db.create_collection("c", _schema())
    calls = []
    real = bitmap.build_valid_mask
    monkeypatch.setattr(bitmap, "build_valid_mask", lambda *a, **k: calls.append(1) or real(*a, **k))
    try:
        col.insert([_row(rng, f"k{i:03d}") for i in range(120)])
        col.flush()
        col.delete(["k007"])
        rows = _pages(col, "tag >= 0", ["tag"], 10)
        assert [r["id"] for r in rows] == [f"k{i:03d}" for i in range(120) if i != 7]
        assert calls == []
    finally:
        db.close()


def test_a_filtered_count_through_grpc_reads_no_row(tmp_path, monkeypatch):
    # milvus-lite counted `count(*)` with a filter by building every matching row (vector included) as a
    # dict: a served count of a million chunks took the server past 19 GB.
    import numpy as np
    from milvus_lite.storage.segment import Segment

    from gateway.storage.milvus import ChunkRecord, MilvusStore
    from gateway.storage.schema import Scope

    store = MilvusStore(str(tmp_path / "g.db"))
    scope = Scope("acme", "docs", "counted")
    store.ensure(scope)
    rng = np.random.default_rng(1)
    store.upsert_chunks(scope, [ChunkRecord(source_id=f"s{n % 7}", chunk_id=str(n), parent_key="", text=f"text {n}",
                                            title="", content_hash="h", created_at=1, updated_at=1,
                                            dense=rng.standard_normal(384).astype(np.float32)) for n in range(70)])
    store.delete_sources(scope, ["s3"])
    name = store.physical(scope).chunks

    def no_rows(*args, **kwargs):
        raise AssertionError("a count built a row")

    monkeypatch.setattr(Segment, "row_to_dict", no_rows)
    monkeypatch.setattr(Segment, "__getitem__", no_rows, raising=False)
    counted = store.guard.query(name, filter=store.scoped(scope, 'source_id in ["s1", "s3", "s5"]'),
                                output_fields=["count(*)"])
    assert counted[0]["count(*)"] == 20
    assert store.guard.query(name, filter="", output_fields=["count(*)"])[0]["count(*)"] == 60
    store.close()


def test_gets_by_key_match_the_engine_through_writes_deletes_flushes_and_compactions(tmp_path):
    """A get by primary keys (a search's fill: `id in [...]`) reads only the asked columns of a segment's
    row, and returns what the engine's get returns: live, deleted and unknown keys, in the asked order."""
    rng = random.Random(12)
    db, col = _collection(tmp_path)
    history = WriteHistory(col, rng, ops=("insert", "insert", "upsert", "delete", "delete", "flush", "flush"),
                           move=0.2, delete_in=(None, "_default"))
    try:
        for step in range(40):
            op = history.step()
            keys = rng.sample(sorted(history.where), min(len(history.where), 12)) + ["never-written"]
            for fields in (["text", "tag"], ["id"], ["tag", "dense"], None, ["*"]):
                for partitions in (None, ["p1"]):
                    got = Collection.get(col, keys, partition_names=partitions, output_fields=fields)
                    want = lite_query.original_get(col, keys, partition_names=partitions, output_fields=fields)
                    assert got == want, f"step {step} ({op}) {fields} {partitions}"
            assert {r["id"] for r in Collection.get(col, keys, output_fields=["id"])} == set(keys) & history.live
    finally:
        db.close()


def test_a_query_reads_unflushed_rows_from_the_memtable_it_snapshotted_when_a_flush_replaces_it(tmp_path, monkeypatch):
    """A flush swaps the collection's memtable for an empty one; a query that took its snapshot before
    materialises those rows from the memtable it snapshotted (it raised IndexError on the new one)."""
    from milvus_lite.storage.memtable import MemTable

    rng = random.Random(13)
    db, col = _collection(tmp_path)
    try:
        col.insert([_row(rng, f"k{i}") for i in range(5)])  # in the memtable, not flushed
        snapshot = col._memtable.to_search_snapshot

        def then_flushed(*args, **kwargs):
            taken = snapshot(*args, **kwargs)
            monkeypatch.setattr(col, "_memtable", MemTable(col._schema))
            return taken

        monkeypatch.setattr(col._memtable, "to_search_snapshot", then_flushed)
        rows = Collection.query(col, None, output_fields=["tag"], limit=10, order_by_pk=True)
        assert [r["id"] for r in rows] == [f"k{i}" for i in range(5)]
    finally:
        db.close()
