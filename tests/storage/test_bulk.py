"""Rows written column by column into the engine in this process read back, and rank, exactly as
rows written through pymilvus (the congruence of storage/bulk.py with the row path)."""

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from gateway.retrieval.hit import chunk_row_id
from gateway.storage import bulk
from gateway.storage.milvus import ChunkRecord
from gateway.storage.schema import Scope

TEXTS = ["Refunds are issued to the original payment method within five business days.",
         "During an outage the status page lists affected regions; refunds wait.",
         "Invoices are emailed monthly, and the refund of an invoice takes a week. Größe naïve café.",
         "Refund refund REFUND: the same term three times, and __under_scores__ too."]
FIELDS = ["id", "tenant", "namespace", "source_id", "chunk_id", "parent_key", "text", "bm25_text", "title",
          "source_url", "source_path", "content_hash", "created_at", "updated_at", "metadata", "dense"]


def _records(version: str = "a") -> list[ChunkRecord]:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((len(TEXTS), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [ChunkRecord(source_id=f"s{i % 2}", chunk_id=str(i), parent_key=f"s{i % 2}#p0", text=f"{text} {version}",
                        title=f"Title {i}", content_hash=f"h{i}{version}", created_at=1, updated_at=2, dense=vector,
                        metadata={"kind": f"k{i}", "tags": ["x", "ü"], "n": i}, index_text=f"Title {i}\n{text}",
                        source_url=f"https://example.com/{i}", source_path=f"docs/{i}.md")
            for i, (text, vector) in enumerate(zip(TEXTS, vectors))]


def _rows(store, scope):
    rows = store.guard.query(store.physical(scope).chunks, filter="", output_fields=FIELDS)
    return sorted(({**r, "dense": [round(float(x), 6) for x in r["dense"]]} for r in rows), key=lambda r: r["id"])


@pytest.fixture
def scopes(lite_store):
    engine, rows = Scope("acme", "docs", "bulk_engine"), Scope("acme", "docs", "bulk_rows")
    for scope in (engine, rows):
        lite_store.drop(scope)
        lite_store.ensure(scope)
    yield engine, rows
    for scope in (engine, rows):
        lite_store.drop(scope)


def test_the_embedded_store_writes_chunks_in_the_engine(lite_store, scopes):
    engine, _ = scopes
    assert bulk.engine_collection(lite_store.guard.store_dir, lite_store.physical(engine).chunks) is not None


def test_engine_rows_read_back_and_rank_as_rows_written_through_pymilvus(lite_store, scopes, monkeypatch):
    engine, rows = scopes
    for version in ("a", "b"):  # "b" rewrites every row: the newer one replaces it, as an upsert does
        lite_store.upsert_chunks(engine, _records(version))
        with monkeypatch.context() as patch:
            patch.setattr(bulk, "engine_collection", lambda *_: None)
            lite_store.upsert_chunks(rows, _records(version))
    assert len(_rows(lite_store, engine)) == len(TEXTS)
    assert _rows(lite_store, engine) == _rows(lite_store, rows)
    for query in ("refund", "outage status", "größe cafe", "under_scores", "invoice refund week"):
        found = [[(h.source_id, h.chunk_id, round(h.score, 5)) for h in lite_store.search_sparse(s, query, 4)]
                 for s in (engine, rows)]
        assert found[0] == found[1] and found[0], query
    vector = _records()[2].dense
    assert ([(h.chunk_id, round(h.score, 5)) for h in lite_store.search_dense(engine, vector, 4)]
            == [(h.chunk_id, round(h.score, 5)) for h in lite_store.search_dense(rows, vector, 4)])
    assert lite_store.guard.committed_rows[lite_store.physical(engine).chunks] == len(TEXTS)


def test_a_value_over_its_length_is_refused_and_nothing_is_written(lite_store, scopes):
    engine, _ = scopes
    with pytest.raises(Exception, match="VARCHAR field 'title' value length 5000 exceeds max_length"):
        lite_store.upsert_chunks(engine, [*_records()[:2], replace(_records()[2], title="t" * 5000)])
    assert _rows(lite_store, engine) == []


def test_the_memtable_flush_by_take_builds_the_table_the_engine_built():
    from milvus_lite.storage.memtable import MemTable

    class Fake:
        _data_schema = pa.schema([("_seq", pa.uint64()), ("id", pa.string()), ("v", pa.list_(pa.float32(), 2)),
                                  ("m", pa.string())])
        _insert_batches = [pa.RecordBatch.from_pydict(
            {"_seq": [1, 2, 3], "_partition": ["_default"] * 3, "id": ["a", "b", "c"],
             "v": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "m": ['{"k": 1}', None, "{}"]},
            schema=pa.schema([("_seq", pa.uint64()), ("_partition", pa.string()), ("id", pa.string()),
                              ("v", pa.list_(pa.float32(), 2)), ("m", pa.string())])) for _ in range(2)]

    assert MemTable._build_data_table is bulk._build_data_table  # patched when the store module loads
    rows = [(0, 2), (1, 0), (1, 1), (0, 0)]
    assert bulk._build_data_table(Fake(), rows).equals(_engine_build_data_table(Fake(), rows))
    assert bulk._build_data_table(Fake(), []).num_rows == 0


def test_the_memtable_flush_groups_the_rows_the_engine_grouped():
    """Inserts in two partitions over several batches, a row written again (its newer version is live), a
    delete in one partition and one in every partition: the same data and delta tables as the engine's."""
    from milvus_lite.schema.arrow_builder import build_wal_data_schema, build_wal_delta_schema
    from milvus_lite.schema.types import CollectionSchema, DataType, FieldSchema
    from milvus_lite.storage.memtable import MemTable

    schema = CollectionSchema([FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=16),
                               FieldSchema("v", DataType.FLOAT_VECTOR, dim=2)])
    memtable = MemTable(schema)
    wal, delta = build_wal_data_schema(schema), build_wal_delta_schema(schema)
    seq = iter(range(1, 100))
    for ids, partition in ((["a", "b", "c"], "_default"), (["d", "b"], "p1"), (["e", "a", "f"], "_default")):
        memtable.apply_insert(pa.RecordBatch.from_pydict(
            {"_seq": [next(seq) for _ in ids], "_partition": [partition] * len(ids), "id": ids,
             "v": [[float(len(i)), 1.0] for i in ids]}, schema=wal))
    for ids, partition in ((["c"], "_default"), (["x", "f"], "_all")):
        number = next(seq)
        memtable.apply_delete(pa.RecordBatch.from_pydict(
            {"id": ids, "_seq": [number] * len(ids), "_partition": [partition] * len(ids)}, schema=delta))
    assert MemTable.flush is bulk._memtable_flush  # patched when the store module loads
    for known in (["_default", "p1"], None):
        got, expected = bulk._memtable_flush(memtable, known), _engine_memtable_flush(memtable, known)
        assert got.keys() == expected.keys() and len(got) >= 2
        for partition, (data, deletes) in expected.items():
            assert (got[partition][0] is None) == (data is None) and (data is None or got[partition][0].equals(data))
            assert (got[partition][1] is None) == (deletes is None) and (deletes is None or got[partition][1].equals(deletes))


def _engine_memtable_flush(self, known_partitions=None):
    """milvus-lite 3.2.2's MemTable.flush, as it ships (the reference for the patch)."""
    from milvus_lite.constants import ALL_PARTITIONS

    with self._lock:
        live_rows_per_partition = {}
        for pk, (batch_idx, row_idx, _seq) in self._pk_index.items():
            batch = self._insert_batches[batch_idx]
            partition = batch.column("_partition")[row_idx].as_py()
            live_rows_per_partition.setdefault(partition, []).append((batch_idx, row_idx))
        data_tables = {}
        for partition, rows in live_rows_per_partition.items():
            data_tables[partition] = self._build_data_table(rows)
        deletes_per_partition = {}
        for pk, (delete_seq, partition) in self._delete_index.items():
            deletes_per_partition.setdefault(partition, []).append((pk, delete_seq))
        all_part_deletes = deletes_per_partition.pop(ALL_PARTITIONS, None)
        if all_part_deletes:
            if known_partitions is None:
                deletes_per_partition[ALL_PARTITIONS] = all_part_deletes
            else:
                for p in known_partitions:
                    deletes_per_partition.setdefault(p, []).extend(all_part_deletes)
        delta_tables = {}
        for partition, entries in deletes_per_partition.items():
            delta_tables[partition] = self._build_delta_table(entries)
    result = {}
    for p in set(data_tables) | set(delta_tables):
        result[p] = (data_tables.get(p), delta_tables.get(p))
    return result


def _engine_build_data_table(self, rows):
    """milvus-lite 3.2.2's MemTable._build_data_table, as it ships (the reference for the patch)."""
    cols = {name: [] for name in self._data_schema.names}
    for batch_idx, row_idx in rows:
        batch = self._insert_batches[batch_idx]
        for name in self._data_schema.names:
            cols[name].append(batch.column(name)[row_idx].as_py())
    return pa.Table.from_pydict(cols, schema=self._data_schema)


def test_a_scan_in_the_engine_reads_what_paging_through_pymilvus_reads(lite_store, scopes, monkeypatch):
    engine, _ = scopes
    lite_store.upsert_chunks(engine, _records("a"))
    lite_store.upsert_chunks(engine, _records("b")[:2])  # newer versions of two rows
    lite_store.delete_chunks(engine, ["docs/s1/3"])  # a tombstone
    name = lite_store.physical(engine).chunks
    # An unflushed row (the memtable): written in the engine without a flush.
    bulk.EngineWriter(bulk.engine_collection(lite_store.guard.store_dir, name)).insert(bulk.chunk_columns(
        engine, lite_store.physical(engine), [replace(_records("d")[0], chunk_id="9")], lite_store.analyzer,
        lite_store.stores_modality(engine), chunk_row_id))
    fields = ["source_id", "content_hash", "created_at", "metadata", "dense", "text"]
    scanned = list(lite_store._iterate(engine, name, "id", fields))
    with monkeypatch.context() as patch:
        patch.setattr(bulk, "engine_collection", lambda *_: None)
        paged = list(lite_store._iterate(engine, name, "id", fields))
    assert [r["id"] for r in scanned] == ["docs/s0/0", "docs/s0/2", "docs/s0/9", "docs/s1/1"]
    assert [r["content_hash"] for r in scanned] == ["h0b", "h2a", "h0d", "h1b"]
    assert _rounded(scanned) == _rounded(paged)
    assert scanned[0]["metadata"] == {"kind": "k0", "tags": ["x", "ü"], "n": 0}


def _rounded(rows):
    return [{**r, "dense": [round(float(x), 6) for x in r["dense"]]} for r in rows]


@pytest.mark.parametrize("path", ["engine", "pymilvus"])
def test_deleting_many_sources_removes_exactly_their_rows(lite_store, scopes, monkeypatch, path):
    from gateway.storage.milvus import ParentRecord

    engine, _ = scopes
    if path == "pymilvus":
        monkeypatch.setattr(bulk, "engine_collection", lambda *_: None)
    # More sources than one `in [...]` batch (500), with ids a filter must escape.
    sources = [f"s-{i}" for i in range(1_200)] + ['quote"d', "it's", "back\\slash", "in [x]"]
    vectors = np.eye(384, dtype=np.float32)
    records = [ChunkRecord(source_id=s, chunk_id=str(c), parent_key=f"{s}#p0", text=f"text of {s} {c}", title="",
                           content_hash=f"{s}-{c}", created_at=1, updated_at=1, dense=vectors[(i + c) % 384])
               for i, s in enumerate(sources) for c in range(2)]
    lite_store.upsert_chunks(engine, records)
    lite_store.upsert_parents(engine, [ParentRecord(f"{s}#p0", s, "", "parent", f"p-{s}") for s in sources])
    gone = sources[::2] + ['quote"d', "back\\slash"]
    removed = lite_store.delete_sources(engine, gone)
    kept = sorted(set(sources) - set(gone))
    assert (removed.chunks, removed.parents) == (2 * len(set(gone)), len(set(gone)))
    assert sorted({row.source_id for row in lite_store.inventory(engine).values()}) == kept
    assert sorted({row.source_id for row in lite_store.parent_inventory(engine).values()}) == kept
    assert lite_store.delete_sources(engine, ["never-there"]).chunks == 0
    stale = [f"docs/{kept[0]}/1", "docs/never/0"]
    assert lite_store.delete_chunks(engine, stale) == 1
    assert {(r.source_id) for k, r in lite_store.inventory(engine).items() if k.startswith(f"docs/{kept[0]}/")} \
        == {kept[0]}
    assert lite_store.count(engine) == 2 * len(kept) - 1


def test_a_count_in_the_engine_counts_what_the_engine_query_counts(lite_store, scopes, monkeypatch):
    engine, other = scopes
    lite_store.upsert_chunks(engine, _records("a"))
    lite_store.upsert_chunks(engine, _records("b")[:2])  # newer versions of two rows
    lite_store.delete_chunks(engine, ["docs/s1/3"])  # a tombstone
    lite_store.upsert_chunks(other, _records("c"))  # another collection's rows
    name = lite_store.physical(engine).chunks
    bulk.EngineWriter(bulk.engine_collection(lite_store.guard.store_dir, name)).insert(bulk.chunk_columns(
        engine, lite_store.physical(engine), [replace(_records("d")[0], chunk_id="9")], lite_store.analyzer,
        lite_store.stores_modality(engine), chunk_row_id))  # an unflushed row
    counted = lite_store.count(engine)
    with monkeypatch.context() as patch:
        patch.setattr(bulk, "engine_collection", lambda *_: None)
        queried = lite_store.count(engine)
    assert counted == queried == 4


def test_counting_a_collection_does_not_read_its_rows(lite_store, scopes):
    """The engine answered count(*) with a filter by building every row as a dict of all its fields
    (vectors as Python floats, ~15 KB a row): `gateway compact` of a million chunks passed 14 GB of
    RSS before its first progress line. A count holds keys and the vector block (1.5 KB a row)."""
    import tracemalloc

    engine, _ = scopes
    rows = 3000
    vectors = np.random.default_rng(5).standard_normal((rows, 384)).astype(np.float32)
    template = _records("a")[0]
    lite_store.upsert_chunks(engine, [replace(template, source_id=f"s{i}", chunk_id="0", parent_key=f"s{i}#p0",
                                              content_hash=f"h{i}", dense=vectors[i]) for i in range(rows)])
    lite_store.guard.flush(lite_store.physical(engine).chunks)
    tracemalloc.start()
    try:
        counted = lite_store.count(engine)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counted == rows
    assert peak / rows < 4000, f"{peak / rows:,.0f} bytes a row"  # 15,616 before


def test_bm25_vectors_of_a_batch_are_the_engines_own_term_frequencies(lite_store, scopes):
    from milvus_lite.analyzer.sparse import compute_tf, sparse_to_bytes

    from gateway.storage.analyzer import Analyzer

    engine, _ = scopes
    collection = bulk.engine_collection(lite_store.guard.store_dir, lite_store.physical(engine).chunks)
    writer = bulk.EngineWriter(collection)
    source, analyzer = next(iter(writer._bm25.values()))
    rng = np.random.default_rng(5)
    words = ["refund", "card", "größe", "naïve", "café", "x", "42", "status", "page"]
    analysed = [" ".join(rng.choice(words, size=n)) for n in rng.integers(1, 40, size=200)]
    # Texts that are not the gateway's analysed form take the analyser's own tokeniser.
    raw = TEXTS + ["", "   ", "UPPER case Refund", "under_score and-dash", "ünïcode ÉTÉ 42"]
    mixed = analysed[:100] + raw + [Analyzer().analyse(t) for t in TEXTS] + analysed[100:]
    # A batch of analysed texts only is split at once; one text that is not sends the batch text by text.
    plain = [" ".join(rng.choice(words[:1] + words[5:], size=n)) for n in rng.integers(1, 40, size=100)]
    assert bulk._all_plain(plain) and bulk._all_plain(["", *plain, ""]) and not bulk._all_plain(analysed)
    for texts in (mixed, analysed, plain, ["", *plain[:5], "", ""], ["refund card", "refund\ncard"], [""], ["x "],
                  [" x"], ["a  b"], ["Refund"]):
        got = writer._sparse(analyzer, texts)
        assert got.to_pylist() == [sparse_to_bytes(compute_tf(analyzer.analyze(t))) for t in texts], texts
    assert writer._sparse(analyzer, []).to_pylist() == []


def test_bm25_vectors_of_an_analysed_batch_are_the_engines_own_term_frequencies(lite_store, scopes):
    """The terms the gateway's analyser found are counted as they are (the analysed texts are not split
    again), and give the bytes the engine's BM25 function computes from the analysed texts."""
    from milvus_lite.analyzer.sparse import compute_tf, sparse_to_bytes

    from gateway.storage.analyzer import AnalysedTexts, Analyzer, Language

    engine, _ = scopes
    collection = bulk.engine_collection(lite_store.guard.store_dir, lite_store.physical(engine).chunks)
    _, analyzer = next(iter(bulk.EngineWriter(collection)._bm25.values()))
    rng = np.random.default_rng(6)
    words = ["Refunds", "card", "the", "42", "status", "pages", "of", "naïve", "Größe", "x_y", "A-B"]
    ascii_only = [" ".join(rng.choice(words[:7], size=n)) for n in rng.integers(0, 40, size=300)]
    for language in (Language.EN, Language.DE, Language.NONE):
        gateway_analyzer = Analyzer(language)
        for texts in (ascii_only, ascii_only + TEXTS, ["", *ascii_only[:5], ""], [""], TEXTS):
            batch = gateway_analyzer.analyse_batch(texts)
            got = bulk._sparse_of(batch)
            assert got is not None
            assert got.to_pylist() == [sparse_to_bytes(compute_tf(analyzer.analyze(t))) for t in batch.texts]
    # A term the engine would split or lowercase is not counted as given: the texts are tokenised instead.
    odd = AnalysedTexts(["a-b"], np.zeros(1, np.int64), np.zeros(1, np.int64), ["a-b"])
    assert bulk._sparse_of(odd) is None


def test_parents_written_in_the_engine_read_back_as_parents_written_through_pymilvus(lite_store, scopes,
                                                                                        monkeypatch):
    from gateway.storage.milvus import ParentRecord

    engine, rows = scopes
    written = []
    monkeypatch.setattr(bulk.EngineWriter, "insert",
                        lambda self, columns, insert=bulk.EngineWriter.insert: written.append(len(columns["key"]))
                        or insert(self, columns))
    for version in ("a", "b"):  # "b" rewrites every parent: the newer one replaces it, as an upsert does
        parents = [ParentRecord(key=f"s{i}#p0", source_id=f"s{i}", title=f"Title {i} {version}", text=f"{t} {version}",
                                content_hash=f"h{i}{version}", metadata={"kind": f"k{i}", "tags": ["x", "ü"], "n": i})
                   for i, t in enumerate(TEXTS)]
        lite_store.upsert_parents(engine, parents)
        with monkeypatch.context() as patch:
            patch.setattr(bulk, "engine_collection", lambda *_: None)
            lite_store.upsert_parents(rows, parents)
    keys = [f"s{i}#p0" for i in range(len(TEXTS))] + ["missing#p0"]
    assert lite_store.parents(engine, keys) == lite_store.parents(rows, keys)
    assert lite_store.parents(engine, keys)["s3#p0"].title == "Title 3 b"
    assert written == [len(TEXTS), len(TEXTS)]  # the engine path wrote them, twice
    assert lite_store.guard.committed_rows[lite_store.physical(engine).parents] == len(TEXTS)


def test_a_long_delete_flushes_as_it_goes_so_pending_deletes_stay_few(lite_store, monkeypatch):
    # milvus-lite checks each pending delete in Python on every search and delete by filter: a prune of
    # 900,000 chunks beside `gateway serve` slowed as they piled up until its one flush at the end.
    from gateway.storage.milvus import undo

    scope = Scope("acme", "docs", "flushing")
    lite_store.drop(scope)
    lite_store.ensure(scope)
    base = _records()[0]
    vectors = np.random.default_rng(5).standard_normal((1200, 384)).astype(np.float32)
    lite_store.upsert_chunks(scope, [replace(base, source_id=f"s{n}", chunk_id="0", parent_key=f"s{n}#p0",
                                             dense=vectors[n]) for n in range(1200)])
    monkeypatch.setattr(undo, "FLUSH_DELETED", 500)
    flushes = []
    real = lite_store.guard.flush
    monkeypatch.setattr(lite_store.guard, "flush", lambda name: flushes.append(name) or real(name))
    removed = lite_store.delete_sources(scope, [f"s{n}" for n in range(1200)])
    chunks = lite_store.physical(scope).chunks
    assert removed.chunks == 1200 and lite_store.count(scope) == 0
    assert flushes.count(chunks) == 3  # after 500 and 1,000 rows, and at the end
