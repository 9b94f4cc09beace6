"""Bulk writes of chunk rows into milvus-lite's engine in this process, column by column.

Through pymilvus, milvus-lite (3.2.2, pure Python) costs about 500 µs of CPU per 384-d chunk row:
pymilvus packs each row into protobuf, milvus-lite's server unpacks it into a dict, checks every
vector element's type in Python, runs its BM25 function row by row, and builds its write-ahead
batch from the dicts (benchmarks/bulk_vectors.py, profiled with py-spy). When the engine runs in
this process (the embedded store, not `gateway serve`'s server), `EngineWriter` hands it the
same write-ahead batch built from columns: the dense vectors as one float32 block, the sparse
BM25 vectors computed with the collection's own analyser and term hash, then the engine's own
write-ahead log and memtable (`Collection._apply`) as its insert would. milvus-lite resolves rows
by primary key and sequence number, so a row written again replaces the old one, as an upsert does.

`patch_engine` replaces the engine's memtable flush, which converted every cell of every row to a
Python object and back (125 µs a row), with Arrow `take`s of the same rows: same table, same order;
and the flush's grouping of live rows by partition, which read each row's partition as an Arrow
scalar (0.25 s of thread time in a 50,000-chunk load), reads each batch's partitions once.

Everything here reaches into milvus-lite's internals, so it is used only with the version it was
written against (`ENGINE_VERSION`); with any other, writes take the pymilvus path.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain, groupby
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gateway.storage.analyzer import AnalysedTexts, Analyzer

log = logging.getLogger(__name__)

# The milvus-lite release whose internals (Collection._apply, MemTable._build_data_table, the
# write-ahead schema, the sparse byte layout) this module was written and tested against.
ENGINE_VERSION = "3.2.2"
_DEFAULT_PARTITION = "_default"
# term -> milvus-lite's term hash (FNV-1a over the UTF-8 bytes, in Python: 3 µs a term); a corpus
# has far fewer distinct terms than tokens. Capped so a huge vocabulary cannot grow it without end.
_TERM_IDS: dict[str, int] = {}
_MAX_TERM_IDS = 1_000_000
# Runs of letters and digits (no `_`) joined by single spaces: storage/analyzer.py's output.
_TERMS = re.compile(r"[^\W_]+(?: [^\W_]+)*")
# What ASCII analysed texts joined by newlines consist of (`_all_plain`).
_PLAIN_BYTES = b"abcdefghijklmnopqrstuvwxyz0123456789 \n"
# One stored BM25 pair: term hash and term frequency, little-endian (milvus_lite.analyzer.sparse).
_PAIR = np.dtype([("term", "<u4"), ("tf", "<f4")])
# An analyser's vocabulary (AnalysedTexts.vocabulary, the list itself), each of its terms' hash, and whether
# the engine's plain analyser reads the term as itself (one `\w+` run, lowercase); grown as it grows.
_VOCABULARY: list[Any] = [None, np.zeros(0, np.uint64), np.zeros(0, bool)]
_WORD = re.compile(r"\w+")


def engine_version() -> str:
    from milvus_lite import __version__
    return str(__version__)


def supported() -> bool:
    try:
        return engine_version() == ENGINE_VERSION
    except ImportError:
        return False


def engine_collection(store_dir: Path | None, name: str) -> Any | None:
    """The engine's collection object when the store at `store_dir` is open in this process; else None
    (a Milvus server, `gateway serve`'s milvus-lite server, or an engine version this was not written for)."""
    if store_dir is None or not supported():
        return None
    from milvus_lite.server_manager import server_manager_instance as manager

    with manager._lock:
        running = manager._servers.get(os.path.abspath(str(store_dir)))
    if running is None:
        return None
    db = running[1]
    if not db.has_collection(name):
        return None
    return db.get_collection(name)


def primary_key(collection: Any) -> str:
    return str(collection._pk_name)


def is_loaded(collection: Any) -> bool:
    """Whether the engine's collection is loaded (a released one is loaded again by the guarded client)."""
    return collection.load_state == "loaded"


class EngineWriter:
    """Inserts rows given as columns into one milvus-lite collection of this process."""

    def __init__(self, collection: Any) -> None:
        self._col = collection
        self._schema: pa.Schema = collection._wal_data_schema
        if collection._partition_key_field is not None:
            raise ValueError(f"collection {collection.name} routes rows by partition key; use the pymilvus path")
        if collection._auto_id or collection._embedding_providers:
            raise ValueError(f"collection {collection.name} generates ids or embeddings; use the pymilvus path")
        # output field -> (input field, the analyser its BM25 function tokenises with)
        self._bm25: dict[str, tuple[str, Any]] = {}
        self._plain: dict[int, bool] = {}
        for function in collection.schema.functions:
            out, source = function.output_field_names[0], function.input_field_names[0]
            if out in collection._bm25_analyzers:
                analyzer = collection._bm25_analyzers[out]
                self._bm25[out] = (source, analyzer)
                self._plain[id(analyzer)] = _is_plain(analyzer)

    def insert(self, columns: Mapping[str, Sequence[Any] | np.ndarray | AnalysedTexts]) -> int:
        """Insert rows: one entry per stored field (BM25 outputs excluded; they are computed here).
        Vector fields are (rows, dim) float32 arrays, JSON fields dicts; a BM25 input may be given as the
        analyser's `AnalysedTexts`, whose terms are then counted as they are. Returns the rows written."""
        from milvus_lite.engine.operation import InsertOp

        analysed = {name: value for name, value in columns.items() if isinstance(value, AnalysedTexts)}
        columns = {**columns, **{name: value.texts for name, value in analysed.items()}}
        count = len(next(iter(columns.values())))
        if count == 0:
            return 0
        col = self._col
        defaults = {f.name: f.default_value for f in col.schema.fields if f.default_value is not None}
        arrays: dict[str, Any] = {}
        for field in self._schema:
            name = field.name
            if name not in columns and name in defaults:  # a field the rows predate (e.g. `modality`)
                columns = {**columns, name: [defaults[name]] * count}
            if name == "_seq":
                start = col._next_seq
                col._next_seq += count
                arrays[name] = pa.array(np.arange(start, start + count, dtype=np.uint64), pa.uint64())
            elif name == "_partition":
                arrays[name] = pa.array([_DEFAULT_PARTITION] * count, pa.string())
            elif name in self._bm25:
                source, analyzer = self._bm25[name]
                counted = (_sparse_of(analysed[source]) if source in analysed and self._plain.get(id(analyzer))
                           else None)
                arrays[name] = counted if counted is not None else self._sparse(analyzer, columns[source])
            elif pa.types.is_fixed_size_list(field.type):
                matrix = np.ascontiguousarray(columns[name], dtype=np.float32)
                if matrix.shape != (count, field.type.list_size):
                    raise ValueError(f"{name} is {matrix.shape}; expected ({count}, {field.type.list_size})")
                arrays[name] = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), field.type.list_size)
            elif name == "$meta":
                arrays[name] = pa.nulls(count, pa.string())
            elif field.type == pa.string() and _is_json(col, name):
                arrays[name] = pa.array(_json_texts(columns[name]), pa.string())
            else:
                arrays[name] = pa.array(columns[name], field.type)
        self._check(arrays)
        batch = pa.RecordBatch.from_arrays([arrays[f.name] for f in self._schema], schema=self._schema)
        if not col._manifest.has_partition(_DEFAULT_PARTITION):
            raise ValueError(f"collection {col.name} has no {_DEFAULT_PARTITION} partition")
        col._apply(InsertOp(partition=_DEFAULT_PARTITION, batch=batch))
        if col._should_flush():
            col._trigger_flush()
        return count

    def _check(self, arrays: Mapping[str, Any]) -> None:
        """What the engine's per-row validation checks that Arrow's typed columns do not: VARCHAR lengths
        (in characters, as milvus-lite counts them) and missing values, refused with the engine's error."""
        import pyarrow.compute as pc
        from milvus_lite.exceptions import SchemaValidationError
        from milvus_lite.schema.types import DataType

        for f in self._col.schema.fields:
            array = arrays.get(f.name)
            if array is None:
                continue
            if array.null_count and not f.nullable:
                raise SchemaValidationError(f"field {f.name!r} is required and {array.null_count} rows have none")
            if f.dtype == DataType.VARCHAR and f.max_length is not None and len(array):
                lengths = pc.utf8_length(array)
                longest = pc.max(lengths).as_py() or 0
                if longest > f.max_length:
                    raise SchemaValidationError(f"VARCHAR field {f.name!r} value length {longest} "
                                                f"exceeds max_length={f.max_length}")

    def _sparse(self, analyzer: Any, texts: Sequence[str]) -> pa.Array:
        """What the engine's BM25 function stores for each text: term frequencies by term hash, as
        (uint32, float32) pairs sorted by term hash (milvus_lite.analyzer.sparse), one binary value a
        text. The texts' tokens are counted together: one sort of (text, term hash) keys, no per-text
        Counter or struct packing (a third of a bulk load's BM25 time)."""
        # The gateway's analysed text (storage/analyzer.py) is lowercase runs of letters and digits joined
        # by single spaces, which a plain `\w+` tokeniser (milvus-lite's standard analyser without stop
        # words) splits exactly there: `split` gives its tokens without the regex pass.
        plain = self._plain.get(id(analyzer))
        if plain and _all_plain(texts):  # a bulk load's batch: every text split at once
            lengths = np.fromiter((text.count(" ") + 1 if text else 0 for text in texts), np.int64, len(texts))
            flat = " ".join(filter(None, texts)).split(" ") if lengths.any() else []
        else:
            terms = [text.split(" ") if plain and text == text.lower() and _TERMS.fullmatch(text)
                     else analyzer.tokenize(text) for text in texts]
            lengths = np.fromiter(map(len, terms), np.int64, len(terms))
            flat = list(chain.from_iterable(terms))
        rows = np.repeat(np.arange(len(texts), dtype=np.uint64), lengths)
        return _pairs(rows, _term_ids(flat), len(texts))


def _sparse_of(analysed: AnalysedTexts) -> pa.Array | None:
    """`EngineWriter._sparse` of the analysed texts, from the terms the analyser found: the texts are
    their terms joined by single spaces, so the plain analyser's tokens are those terms when each term is
    one lowercase `\\w+` run; None when one is not (then the texts are tokenised as they are)."""
    hashes, plain = _vocabulary_hashes(analysed.vocabulary)
    if not plain[analysed.terms].all():
        return None
    return _pairs(analysed.rows.astype(np.uint64), hashes[analysed.terms], len(analysed.texts))


def _vocabulary_hashes(vocabulary: list[str]) -> tuple[np.ndarray, np.ndarray]:
    cached, hashes, plain = _VOCABULARY
    if cached is not vocabulary or len(hashes) > len(vocabulary):
        hashes, plain = np.zeros(0, np.uint64), np.zeros(0, bool)
    if len(hashes) < len(vocabulary):
        new = vocabulary[len(hashes):]
        hashes = np.concatenate([hashes, _term_ids(new)])
        plain = np.concatenate([plain, np.fromiter((t == t.lower() and _WORD.fullmatch(t) is not None for t in new),
                                                   bool, len(new))])
    _VOCABULARY[:] = [vocabulary, hashes, plain]
    return hashes, plain


def _pairs(rows: np.ndarray, ids: np.ndarray, texts: int) -> pa.Array:
    """The engine's sparse bytes of `texts` texts from their tokens' text indices (`rows`, uint64, ascending)
    and term hashes: term frequencies as (uint32, float32) pairs sorted by term hash, one binary value a text.
    The texts' tokens are counted together: one sort of (text, term hash) keys, no per-text Counter or
    struct packing (a third of a bulk load's BM25 time)."""
    keys, counts = np.unique((rows << np.uint64(32)) | ids, return_counts=True)
    pairs = np.empty(len(keys), dtype=_PAIR)
    pairs["term"] = keys & np.uint64(0xFFFFFFFF)
    pairs["tf"] = counts
    # Text i's pairs are keys[ends[i - 1]:ends[i]]; a text without terms stores b"" as the engine does.
    ends = np.searchsorted(keys >> np.uint64(32), np.arange(texts + 1, dtype=np.uint64))
    offsets = pa.py_buffer((ends * _PAIR.itemsize).astype(np.int32).tobytes())
    return pa.Array.from_buffers(pa.binary(), texts, [None, offsets, pa.py_buffer(pairs.tobytes())])


def _all_plain(texts: Sequence[str]) -> bool:
    """Whether every text is ASCII analysed text (storage/analyzer.py): runs of a-z and 0-9 joined by single
    spaces, or empty. One pass over the batch in C, where `_TERMS.fullmatch` per text was a third of the work."""
    joined = "\n".join(texts)
    return (joined.isascii() and joined.count("\n") == len(texts) - 1 and not joined.encode("ascii").translate(None, _PLAIN_BYTES)
            and "  " not in joined and " \n" not in joined and "\n " not in joined
            and not joined.startswith(" ") and not joined.endswith(" "))


def _term_ids(terms: list[str]) -> np.ndarray:
    """milvus-lite's term hash of each term, as uint64."""
    from milvus_lite.analyzer.hash import term_to_id

    ids = _TERM_IDS
    try:
        return np.fromiter(map(ids.__getitem__, terms), np.uint64, len(terms))
    except KeyError:
        if len(ids) > _MAX_TERM_IDS:
            ids.clear()
        for term in set(terms).difference(ids):
            ids[term] = term_to_id(term)
        return np.fromiter(map(ids.__getitem__, terms), np.uint64, len(terms))


def _json_texts(values: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each value as json.dumps(dict(value), ensure_ascii=False) writes it; a document's chunks share one
    metadata object, encoded once."""
    texts: dict[int, str] = {}
    encode = _JSON.encode
    return [texts.get(id(v)) or texts.setdefault(id(v), encode(dict(v))) for v in values]


# json.dumps(..., ensure_ascii=False) builds this encoder anew on every call.
_JSON = json.JSONEncoder(ensure_ascii=False)


def _is_plain(analyzer: Any) -> bool:
    """milvus-lite's standard analyser with no stop words: `\\w+` runs of the lowercased text."""
    from milvus_lite.analyzer.standard import StandardAnalyzer

    return type(analyzer) is StandardAnalyzer and not analyzer._stop_words and analyzer._pattern.pattern == r"\w+"


def _is_json(col: Any, name: str) -> bool:
    from milvus_lite.schema.types import DataType

    return any(f.name == name and f.dtype == DataType.JSON for f in col.schema.fields)


def _build_data_table(self: Any, rows: list[tuple[int, int]]) -> pa.Table:
    """MemTable._build_data_table by Arrow `take`: the rows in the order given, columns of `data_schema`."""
    names = self._data_schema.names
    if not rows:
        return pa.Table.from_pydict({name: [] for name in names}, schema=self._data_schema)
    parts = []
    for batch_idx, group in groupby(rows, key=lambda r: r[0]):
        batch = self._insert_batches[batch_idx]
        picked = pa.array([row for _, row in group], pa.int64())
        parts.append(pa.RecordBatch.from_arrays([batch.column(name).take(picked) for name in names],
                                                schema=self._data_schema))
    return pa.Table.from_batches(parts, schema=self._data_schema)


def _memtable_flush(self: Any, known_partitions: list[str] | None = None) -> dict[str, tuple[Any, Any]]:
    """MemTable.flush of milvus-lite 3.2.2, with each insert batch's `_partition` column read once as a list
    instead of one Arrow scalar a live row; the same tables, from the same rows in the same order."""
    from milvus_lite.constants import ALL_PARTITIONS

    with self._lock:
        partitions: dict[int, list[str]] = {}
        live: dict[str, list[tuple[int, int]]] = {}
        for batch_idx, row_idx, _seq in self._pk_index.values():
            names = partitions.get(batch_idx)
            if names is None:
                names = partitions[batch_idx] = self._insert_batches[batch_idx].column("_partition").to_pylist()
            live.setdefault(names[row_idx], []).append((batch_idx, row_idx))
        data_tables = {partition: self._build_data_table(rows) for partition, rows in live.items()}
        deletes: dict[str, list[tuple[Any, int]]] = {}
        for pk, (delete_seq, partition) in self._delete_index.items():
            deletes.setdefault(partition, []).append((pk, delete_seq))
        everywhere = deletes.pop(ALL_PARTITIONS, None)
        if everywhere:
            if known_partitions is None:
                deletes[ALL_PARTITIONS] = everywhere
            else:
                for partition in known_partitions:
                    deletes.setdefault(partition, []).extend(everywhere)
        delta_tables = {partition: self._build_delta_table(entries) for partition, entries in deletes.items()}
    return {p: (data_tables.get(p), delta_tables.get(p)) for p in set(data_tables) | set(delta_tables)}


_patched = False


def patch_engine() -> bool:
    """Replace milvus-lite's memtable flush with `_memtable_flush` and `_build_data_table`, its brute-force
    cosine search with storage/lite_search.py's, its BM25 index with storage/lite_sparse.py's arrays, its
    per-search row validity with storage/lite_validity.py's (whose dense search also converts only the
    projected columns of its hits), and its key-ordered query (a cursor page) and get by keys with
    storage/lite_query.py's (once; only on ENGINE_VERSION)."""
    global _patched
    if _patched:
        return True
    if not supported():
        return False
    from milvus_lite.storage.memtable import MemTable

    MemTable._build_data_table = _build_data_table
    MemTable.flush = _memtable_flush
    from gateway.storage import lite_filter, lite_query, lite_search, lite_sparse, lite_validity

    lite_filter.patch()
    lite_search.patch()
    lite_sparse.patch()
    lite_validity.patch()
    lite_query.patch()
    _patched = True
    return True


def chunk_columns(scope: Any, physical: Any, chunks: Sequence[Any], analyzer: Analyzer, modal: bool,
                  row_id: Any) -> dict[str, Any]:
    """The chunk collection's columns (storage/schema.py's chunk_schema) for `ChunkRecord`s; `bm25_text`
    analysed by `analyzer` as one batch."""
    columns: dict[str, Any] = {
        "id": [physical.row_key(row_id(scope.namespace, c.source_id, c.chunk_id)) for c in chunks],
        "tenant": [scope.tenant] * len(chunks),
        "namespace": [scope.namespace] * len(chunks),
        "source_id": [c.source_id for c in chunks],
        "chunk_id": [c.chunk_id for c in chunks],
        "parent_key": [c.parent_key for c in chunks],
        "text": [c.text for c in chunks],
        "bm25_text": analyzer.analyse_batch([c.index_text or c.text for c in chunks]),
        "dense": np.stack([np.asarray(c.dense, dtype=np.float32) for c in chunks]),
        "title": [c.title for c in chunks],
        "source_url": [c.source_url for c in chunks],
        "source_path": [c.source_path for c in chunks],
        "content_hash": [c.content_hash for c in chunks],
        "created_at": [c.created_at for c in chunks],
        "updated_at": [c.updated_at for c in chunks],
        "metadata": [c.metadata for c in chunks],
    }
    if modal:
        columns["modality"] = [c.modality for c in chunks]
    return columns


def scan(collection: Any, expr: str | None, fields: Sequence[str], key: str,
         page: int = 2000) -> Iterator[dict[str, Any]]:
    """Every live row of the collection that `expr` matches, with `fields`, in `key` order.

    The engine's own query materialises every matching row of every segment as a dict of all its
    fields on each call, so paging through a collection by key (what `MilvusStore._iterate` does
    through pymilvus) costs a whole scan per page: quadratic, hours at a million rows. This reads the
    engine's candidate set once (its filter, its tombstones and newest-version rule: the same
    `assemble_candidates` and `build_valid_mask` its query uses), then takes the asked columns of a
    page of rows at a time from the segments' Arrow tables."""
    from milvus_lite.search.assembler import materialize_record
    from milvus_lite.schema.types import DataType

    col = collection
    pks, sources, live = _live(col, expr)
    if not pks:
        return
    ordered = sorted(live.tolist(), key=pks.__getitem__) if key == col._pk_name else live.tolist()
    names = list(dict.fromkeys([col._pk_name, *fields]))
    json_fields = {f.name for f in col.schema.fields if f.dtype == DataType.JSON}
    for start in range(0, len(ordered), page):
        chunk = ordered[start:start + page]
        rows: list[dict[str, Any] | None] = [None] * len(chunk)
        by_source: dict[int, tuple[Any, list[tuple[int, Any]]]] = {}
        for n, index in enumerate(chunk):
            source, ref = sources[index]
            by_source.setdefault(id(source), (source, []))[1].append((n, ref))
        for source, refs in by_source.values():
            if all(isinstance(ref, int) for _, ref in refs):  # a segment: its rows by Arrow take
                taken = source.table.select(names).take(pa.array([ref for _, ref in refs], pa.int64()))
                found = taken.to_pylist()
            else:  # the memtable (unflushed rows): few, one at a time as the engine reads them
                found = [{name: materialize_record((source, ref)).get(name) for name in names} for _, ref in refs]
            for (n, _), row in zip(refs, found):
                rows[n] = row
        for row in rows:
            assert row is not None
            for name in json_fields.intersection(row):
                if isinstance(row[name], str):
                    row[name] = json.loads(row[name])
            yield row


def count(collection: Any, expr: str | None) -> int:
    """How many live rows of the collection `expr` matches: the rows `scan` reads, counted.

    Asked for `count(*)` with a filter, the engine materialises every matching row as a dict of all
    its fields and returns the length of that list: about 15 KB a 384-d row, vectors as Python
    floats, so more than 14 GB at a million rows (`gateway compact` of a million chunks never got
    past its first count). This holds each row's key, sequence number and vector block, as a search does."""
    return int(_live(collection, expr)[2].size)


def _live(collection: Any, expr: str | None) -> tuple[list[Any], list[Any], np.ndarray]:
    """The collection's candidate rows (keys and where each lives) and the indexes of those live and
    matching `expr`: the engine's own `assemble_candidates` and `build_valid_mask`, as its query runs them
    (its filter, its tombstones, its newest-version rule)."""
    from milvus_lite.search.assembler import assemble_candidates
    from milvus_lite.search.bitmap import build_valid_mask

    collection._require_loaded()
    compiled = collection._compile_filter(expr) if expr else None
    seg_snap, delta_snap = collection._read_snapshot()
    pks, seqs, _vectors, sources, matched = assemble_candidates(
        segments=seg_snap, memtable=collection._memtable, vector_field=collection._vector_name, partition_names=None,
        filter_compiled=compiled, indexed_filter_plan=collection._indexed_filter_plan(compiled))
    if not pks:
        return [], [], np.zeros(0, dtype=np.int64)
    mask = build_valid_mask(pks, seqs, delta_snap, filter_mask=matched, memtable=collection._memtable)
    return pks, sources, np.flatnonzero(mask)


def rows_to_columns(rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> dict[str, Any]:
    """Rows as read back (`scan`, a query) as `EngineWriter.insert` columns; a field no row has is left out."""
    columns: dict[str, Any] = {}
    for name in fields:
        if name not in rows[0]:
            continue
        values = [row[name] for row in rows]
        columns[name] = np.asarray(values, dtype=np.float32) if name == "dense" else values
    return columns
