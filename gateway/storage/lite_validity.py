"""milvus-lite's per-row validity (newest version, tombstones) computed once per segment set, not per search.

milvus-lite 3.2.2 decides which rows a search may return (the newest version of each primary key,
not deleted) with Python loops over every row of every segment, on every search: once for the
dense path (`execute_search_with_index`: a pk -> newest seq dict, then `_build_local_mask`) and
once for BM25 (`Collection._search_sparse`). At 1,000,000 rows that was ~1.4 s of CPU per dense
search and ~1.2 s per BM25 search, against ~30 ms for the HNSW search itself (py-spy).

Those verdicts change only when the segments or the flushed tombstones change, so `segment_masks`
keeps, per set of segments, one boolean mask per segment (the row is its key's newest version
among those segments and no flushed delete shadows it), and rebuilds it when any segment (object,
file, row count, seq checksum) or the tombstone map differs. Keys repeated across or within
segments and tombstoned keys are found with set intersections in C; only those few rows are
visited in Python. Each search then applies the small, fast-changing part on a copy: memtable
rows that shadow segment rows and the memtable's pending deletes, looked up through the
segments' own pk -> row maps, O(memtable) rather than O(rows).

`execute_search_with_index` and `search_sparse` are the engine's functions with the validity step
replaced (and, in `search_sparse`, segment BM25 indexes built from the stored column by
storage/lite_sparse.py); both read a returned row's projected fields only, and no row at all when only
keys are asked for (`keys_only`). Same candidates, same order, same results
(tests/storage/test_lite_validity.py compares them with the originals through inserts, upserts,
deletes, flushes and compactions).

Both also evaluated a search's filter (the tenant boundary, and any metadata filter with it) over
every row of every flushed segment on every search, though a flushed segment never changes:
`segment_filter` keeps each (compiled filter, segment) mask, so a tenant's boundary is evaluated
once per segment, and a request's dense and BM25 searches share one evaluation. Keyed by a number
given to the compiled filter (milvus-lite keeps one per expression and collection, in an LRU) and the
segment, in an `ArrayCache`; bounded in bytes across collections and tenants (a byte a row,
`FILTER_MASK_BYTES`), least recently used first out. The expression holds the tenant's boundary, so no tenant's search can use a
mask made for another tenant. A lookup by primary key (a fill) names new keys every time and is not kept.
A tenant's boundary over 100,000 rows: 0.57 ms of CPU a search evaluated, 0.04 ms kept.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from gateway.storage import lite_sparse
from gateway.storage.array_cache import ArrayCache

# A handful of segment sets (collections x partition scopes) searched in turn; one mask byte per row.
_MAX_CACHED = 16
_CACHE: OrderedDict[tuple, tuple[tuple, dict, tuple[np.ndarray, ...], tuple]] = OrderedDict()
_LOCK = threading.Lock()


# Filter masks of flushed segments kept at most, in bytes (one a row): a 100,000-row collection's
# masks for about 300 boundaries and filters.
FILTER_MASK_BYTES = 32 << 20
_MASKS: ArrayCache[tuple] = ArrayCache(FILTER_MASK_BYTES)
_FILTER_NUMBERS = itertools.count()  # one per compiled filter, never reused as an id() may be


def _segment_key(seg: Any) -> tuple:
    seqs = seg.seqs
    # Segment objects are immutable after load; the seq checksum guards against an id reused by a
    # segment reloaded from a rewritten file of the same name and size.
    return (id(seg), seg.file_path, seg.num_rows, id(seqs),
            int(seqs.sum()) if len(seqs) else 0, int(seqs[0]) if len(seqs) else -1)


def _duplicates_within(seg: Any) -> dict[Any, list[int]]:
    """pk -> rows, for the keys a segment holds more than once (its pk_to_row keeps only the last)."""
    rows: dict[Any, list[int]] = {}
    for i, pk in enumerate(seg.pks):
        rows.setdefault(pk, []).append(i)
    return {pk: found for pk, found in rows.items() if len(found) > 1}


def _rows(seg: Any, repeated: dict[Any, list[int]], pk: Any) -> list[int]:
    found = repeated.get(pk)
    if found is not None:
        return found
    row = seg.pk_to_row.get(pk)
    return [] if row is None else [row]


def _build(segments: Sequence[Any], tombstones: dict) -> tuple[tuple[np.ndarray, ...], tuple]:
    masks = [np.ones(seg.num_rows, dtype=bool) for seg in segments]
    repeated = tuple(_duplicates_within(seg) if len(seg.pk_to_row) != seg.num_rows else {} for seg in segments)
    contested: set = set()
    seen: set = set()
    for seg, dupes in zip(segments, repeated):
        keys = seg.pk_to_row.keys()
        contested.update(dupes)
        contested.update(keys & seen)
        seen.update(keys)
    for pk in contested:
        located = [(n, row, int(segments[n].seqs[row]))
                   for n, seg in enumerate(segments) for row in _rows(seg, repeated[n], pk)]
        newest = max(seq for _, _, seq in located)
        for n, row, seq in located:
            if seq != newest:
                masks[n][row] = False
    for pk in tombstones.keys() & seen:
        deleted_at = tombstones[pk]
        for n, seg in enumerate(segments):
            for row in _rows(seg, repeated[n], pk):
                if deleted_at > int(seg.seqs[row]):
                    masks[n][row] = False
    for mask in masks:
        mask.setflags(write=False)
    return tuple(masks), repeated


def segment_masks(segments: Sequence[Any], tombstones: dict) -> tuple[tuple[np.ndarray, ...], tuple]:
    """Per segment, read-only: row i is the newest version of its key among `segments` and no tombstone
    (pk -> delete seq, milvus-lite's DeltaIndex map) shadows it. Also returns each segment's repeated keys."""
    key = tuple(_segment_key(seg) for seg in segments)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is not None and cached[1] == tombstones:
            _CACHE.move_to_end(key)
            return cached[2], cached[3]
    masks, repeated = _build(segments, tombstones)
    with _LOCK:
        # The tombstone map is the search's own frozen copy (DeltaIndex.frozen_copy): nobody mutates it.
        _CACHE[key] = (key, tombstones, masks, repeated)
        _CACHE.move_to_end(key)
        while len(_CACHE) > _MAX_CACHED:
            _CACHE.popitem(last=False)
    return masks, repeated


def segment_filter(seg: Any, compiled: Any, indexed_plan: Any) -> np.ndarray:
    """milvus-lite's `evaluate_segment_filter` of a flushed segment, read-only, evaluated once per
    (compiled filter, segment) while kept (module docstring)."""
    from milvus_lite.search.indexed_filter import evaluate_segment_filter

    number = compiled.__dict__.get("_mask_number")
    if number is None:
        number = next(_FILTER_NUMBERS)
        object.__setattr__(compiled, "_mask_number", number)  # a compiled filter is kept and reused
    key = (number, _segment_key(seg))
    mask = _MASKS.get(key)
    if mask is None:
        # A copy: an indexed plan's answer may be an index's own array.
        mask = np.array(evaluate_segment_filter(seg, compiled, indexed_plan), dtype=bool)
        mask.setflags(write=False)
        if mask.nbytes <= _MASKS.max_bytes // 8:  # a segment larger would push out most others
            _MASKS.put(key, mask)
    return mask


def _locate(segments: Sequence[Any], repeated: tuple, pks: Iterable[Any]) -> dict[Any, list[tuple[int, int]]]:
    """pk -> [(segment number, row)] for the given keys that any segment holds."""
    wanted = pks if isinstance(pks, (set, frozenset)) else set(pks)
    located: dict[Any, list[tuple[int, int]]] = {}
    if not wanted:
        return located
    for n, seg in enumerate(segments):
        for pk in seg.pk_to_row.keys() & wanted:
            located.setdefault(pk, []).extend((n, row) for row in _rows(seg, repeated[n], pk))
    return located


def _newest_in_segments(segments: Sequence[Any], located: dict[Any, list[tuple[int, int]]]) -> dict[Any, int]:
    return {pk: max(int(segments[n].seqs[row]) for n, row in where) for pk, where in located.items()}


def _shadow(segments: Sequence[Any], masks: list[np.ndarray], located: dict[Any, list[tuple[int, int]]],
            newer: dict[Any, int], applies: Any = None) -> None:
    """Mark invalid the segment rows of each key in `newer` whose seq is below its seq there
    (a newer memtable version, a pending delete); `applies(pk, segment)` limits which segments."""
    for pk, seq in newer.items():
        for n, row in located.get(pk, ()):
            if seq > int(segments[n].seqs[row]) and (applies is None or applies(pk, segments[n])):
                masks[n][row] = False


def _writable(cached: Sequence[np.ndarray], located: dict[Any, list[tuple[int, int]]]) -> list[np.ndarray]:
    """The cached masks, with a private copy of each one a located key's row is in (the rest shared)."""
    touched = {n for where in located.values() for n, _ in where}
    return [mask.copy() if n in touched else mask for n, mask in enumerate(cached)]


def dense_masks(segments: Sequence[Any], tombstones: dict, mt_pks: Sequence[Any], mt_seqs: np.ndarray,
                mt_deletes: dict) -> tuple[list[np.ndarray], np.ndarray]:
    """What execute_search_with_index's `_build_local_mask` yields (before the filter) for each in-scope
    segment and for the memtable rows: newest version across all of them, no flushed or pending delete."""
    cached, repeated = segment_masks(segments, tombstones)
    mt_seq_list = [int(s) for s in mt_seqs.tolist()]
    mt_newest = dict(zip(mt_pks, mt_seq_list))
    located = _locate(segments, repeated, set(mt_newest) | mt_deletes.keys())
    masks = _writable(cached, located)
    _shadow(segments, masks, located, mt_newest)
    _shadow(segments, masks, located, {pk: entry[0] for pk, entry in mt_deletes.items()})
    seg_newest = _newest_in_segments(segments, {pk: located[pk] for pk in mt_newest if pk in located})
    mt_mask = np.zeros(len(mt_pks), dtype=bool)
    for i, (pk, seq) in enumerate(zip(mt_pks, mt_seq_list)):
        if seg_newest.get(pk, seq) > seq:
            continue
        deleted_at = tombstones.get(pk)
        if deleted_at is not None and deleted_at > seq:
            continue
        pending = mt_deletes.get(pk)
        if pending is not None and pending[0] > seq:
            continue
        mt_mask[i] = True
    return masks, mt_mask


def execute_search_with_index(query_vectors: np.ndarray, segments: Iterable[Any], memtable: Any, delta_index: Any,
                              top_k: int, metric_type: str, pk_field: str, vector_field: str,
                              partition_names: list[str] | None = None, compiled_filter: Any = None,
                              output_fields: list[str] | None = None, indexed_filter_plan: Any = None,
                              project_record_fn: Any = None, search_params: dict | None = None) -> list[list[dict]]:
    """milvus_lite.search.executor_indexed.execute_search_with_index (3.2.2) with `dense_masks` as its validity."""
    from milvus_lite.index.brute_force import BruteForceIndex

    if query_vectors.ndim == 1:
        query_vectors = query_vectors.reshape(1, -1)
    if query_vectors.dtype != np.float32:
        query_vectors = query_vectors.astype(np.float32, copy=False)
    nq = int(query_vectors.shape[0])
    if nq == 0 or top_k <= 0:
        return [[] for _ in range(nq)]
    partition_filter = set(partition_names) if partition_names else None
    in_scope = [s for s in segments if s.num_rows > 0 and (partition_filter is None or s.partition in partition_filter)]
    mt_pks, mt_seqs, mt_vecs, mt_row_refs, mt_table = memtable.to_search_snapshot(
        vector_field=vector_field, partition_names=partition_names, include_table=compiled_filter is not None)
    if not in_scope and not mt_pks:
        return [[] for _ in range(nq)]
    seg_masks, mt_mask = dense_masks(in_scope, delta_index._map, mt_pks, mt_seqs, memtable.delete_index_snapshot())

    seg_filter_masks: dict[int, np.ndarray] = {}
    mt_filter_mask = None
    if compiled_filter is not None:
        from milvus_lite.search.filter import evaluate_mask
        for seg in in_scope:
            seg_filter_masks[id(seg)] = segment_filter(seg, compiled_filter, indexed_filter_plan)
        if mt_pks and mt_table is not None:
            mt_filter_mask = evaluate_mask(compiled_filter, mt_table)

    per_query: list[list[tuple[float, int, int]]] = [[] for _ in range(nq)]
    sources: list[Sequence[Any]] = []

    def recall(source_idx: int, valid: np.ndarray, filter_mask: np.ndarray | None, vectors: np.ndarray,
               index: Any) -> None:
        if valid.shape[0] == 0:
            return
        local_mask = valid & filter_mask.astype(bool) if filter_mask is not None else valid
        if not local_mask.any():
            return
        if index is None:
            index = BruteForceIndex.build(vectors, metric_type)
        local_ids, dists = index.search(query_vectors, top_k, valid_mask=None if local_mask.all() else local_mask,
                                        params=search_params)
        for q in range(nq):
            for j in range(top_k):
                lid = int(local_ids[q, j])
                if lid < 0:
                    break
                per_query[q].append((float(dists[q, j]), source_idx, lid))

    for seg, valid in zip(in_scope, seg_masks):
        seg_vectors, null_mask = seg.vector_data(vector_field)
        sources.append(seg.pks)
        combined = seg_filter_masks.get(id(seg))
        if null_mask is not None:
            combined = combined & null_mask if combined is not None else null_mask
        recall(len(sources) - 1, valid, combined, seg_vectors, seg.indexes.get(vector_field))
    if mt_pks:
        sources.append(mt_pks)
        recall(len(sources) - 1, mt_mask, mt_filter_mask, mt_vecs, None)
    n_segments = len(in_scope)

    if project_record_fn is not None:
        project_entity = project_record_fn
    elif output_fields is None:
        def project_entity(record: dict) -> dict:
            return {k: v for k, v in record.items() if k != pk_field and k != vector_field}
    else:
        keep = set(output_fields)
        keep.discard(pk_field)

        def project_entity(record: dict) -> dict:
            return {k: record[k] for k in keep if k in record}

    read = projected_columns(output_fields, pk_field)
    keys = keys_only(output_fields, pk_field)
    results: list[list[dict]] = []
    for q in range(nq):
        candidates = per_query[q]
        candidates.sort(key=lambda c: (c[0], c[1], c[2]))
        hits: list[dict] = []
        for dist, source_idx, local_id in candidates[:top_k]:
            if keys:
                hits.append({"id": sources[source_idx][local_id], "distance": dist, "entity": {}})
                continue
            if source_idx < n_segments:
                record = segment_row(in_scope[source_idx], local_id, read)
            else:
                record = memtable.materialize_row(*mt_row_refs[local_id])
            pk = record.get(pk_field) if pk_field in record else sources[source_idx][local_id]
            hits.append({"id": pk, "distance": dist, "entity": project_entity(record)})
        results.append(hits)
    return results


def keys_only(output_fields: list[str] | None, pk_field: str) -> bool:
    """Whether a search's hits project to no field at all: only the primary key is asked for (or
    nothing), which a search returns as the hit's id and never in its entity. Such hits are answered
    from the candidates' keys without reading their rows (the gateway's first pass asks for keys only,
    storage/milvus/rows.py `searched_fields`)."""
    return output_fields is not None and set(output_fields) <= {pk_field}


def projected_columns(output_fields: list[str] | None, pk_field: str) -> Callable[[str], bool] | None:
    """Which of a segment's columns a dense hit's projection can use, None for every one. The engine
    converted each column of every hit to Python (the dense vector's floats included) and then kept
    the requested ones. A segment's columns are the schema's fields, `$meta` (dynamic fields, as
    JSON; always read, since any of them may be projected) and internal ones."""
    if output_fields is None or "*" in output_fields:
        return None
    wanted = set(output_fields) | {pk_field}
    return lambda column, names=frozenset(wanted): column in names or column == "$meta"


def segment_row(segment: Any, row: int, read: Callable[[str], bool] | None) -> dict:
    """`segment.row_to_dict(row)` (milvus-lite 3.2.2) restricted to the columns `read` accepts: the
    same values under the same keys for every projected field, `$meta` unpacked alike."""
    if read is None:
        return segment.row_to_dict(row)
    table = segment.table
    record = {name: table.column(name)[row].as_py() for name in table.schema.names if name != "_seq" and read(name)}
    meta = record.get("$meta")
    if isinstance(meta, str):
        try:
            decoded = json.loads(meta)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            record.update(decoded)
    elif isinstance(meta, dict):
        record.update(meta)
    return record


def sparse_masks(segments: Sequence[Any], tombstones: dict, mt_index: Sequence[tuple[Any, tuple]],
                 mt_deletes: dict) -> tuple[list[np.ndarray], dict[Any, int]]:
    """What Collection._search_sparse's per-row loop yields (before the filter) for each of `segments`
    (all of the snapshot: versions are resolved across partitions), and the newest segment seq of each
    memtable key that segments also hold."""
    from milvus_lite.constants import ALL_PARTITIONS

    cached, repeated = segment_masks(segments, tombstones)
    mt_newest = {pk: seq for pk, (_, _, seq) in mt_index}
    located = _locate(segments, repeated, set(mt_newest) | mt_deletes.keys())
    masks = _writable(cached, located)
    _shadow(segments, masks, located, mt_newest)
    pending = {pk: entry[0] for pk, entry in mt_deletes.items()}
    _shadow(segments, masks, located, pending,
            applies=lambda pk, seg: mt_deletes[pk][1] in (ALL_PARTITIONS, seg.partition))
    return masks, _newest_in_segments(segments, {pk: located[pk] for pk in mt_newest if pk in located})


def search_sparse(self: Any, query_vectors: list, vector_field: str, top_k: int, metric_type: str,
                  partition_names: list[str] | None, expr: str | None, output_fields: list[str] | None,
                  timezone: str | None = None) -> list[list[dict]]:
    """milvus_lite Collection._search_sparse (3.2.2) with `sparse_masks` as its validity, segment indexes
    built from the stored column by storage/lite_sparse.py."""
    from milvus_lite.analyzer.sparse import bytes_to_sparse
    from milvus_lite.engine.projection import build_projection_plan, project_record
    from milvus_lite.index.sparse_factory import (
        _search_prepared_sparse_index,
        create_sparse_index,
        sparse_index_matches,
    )

    partition_filter = set(partition_names) if partition_names else None
    projection_plan = build_projection_plan(output_fields, self._schema, api_kind="search")
    sparse_spec = self._index_specs.get(vector_field)
    index_params = sparse_spec.build_params if sparse_spec else {}
    query_sparse = self._prepare_sparse_queries(query_vectors, vector_field)
    nq = len(query_sparse)
    compiled_filter = self._compile_filter(expr, timezone=timezone) if expr else None
    indexed_filter_plan = self._indexed_filter_plan(compiled_filter)
    per_query: list[list[tuple[float, Any, Any]]] = [[] for _ in range(nq)]

    seg_snapshot, delta_snap = self._read_snapshot()
    memtable = self._memtable  # once: a flush replaces it
    mt_deletes = memtable.delete_index_snapshot()
    seg_masks, seg_newest = sparse_masks(seg_snapshot, delta_snap._map, memtable.pk_index_snapshot(),
                                         mt_deletes)

    for seg, valid_mask in zip(seg_snapshot, seg_masks):
        if partition_filter is not None and seg.partition not in partition_filter:
            continue
        table = seg.table
        if table is None or len(table) == 0:
            continue
        cached_idx = seg.sparse_indexes.get(vector_field)
        if not sparse_index_matches(cached_idx, metric_type, index_params):
            cached_idx = create_sparse_index(metric_type, index_params)
            lite_sparse.build(cached_idx, table.column(vector_field))
            seg.sparse_indexes[vector_field] = cached_idx
        if compiled_filter is not None:
            valid_mask = valid_mask & segment_filter(seg, compiled_filter, indexed_filter_plan)
        if not valid_mask.any():
            continue
        pks, seqs = seg.pks, seg.seqs
        local_ids, dists = _search_prepared_sparse_index(cached_idx, query_sparse, top_k, valid_mask=valid_mask)
        for qi in range(nq):
            for j in range(top_k):
                lid = int(local_ids[qi, j])
                if lid < 0:
                    break
                per_query[qi].append((float(dists[qi, j]), pks[lid], (table, lid), int(seqs[lid])))

    tombstones = delta_snap._map
    mt_pks: list = []
    mt_sparse: list = []
    mt_refs: list = []
    for pk, seq, record in memtable.active_record_snapshots(partition_names=partition_names):
        deleted_at = tombstones.get(pk)
        if (deleted_at is not None and deleted_at > seq) or seg_newest.get(pk, -1) > seq:
            continue
        raw = record.get(vector_field)
        mt_pks.append(pk)
        mt_sparse.append(bytes_to_sparse(raw) if isinstance(raw, bytes) else (raw or {}))
        mt_refs.append((record, seq))
    if mt_pks:
        mt_valid = np.ones(len(mt_pks), dtype=bool)
        if compiled_filter is not None:
            from milvus_lite.search.filter.eval.python_backend import _eval_row
            for i in range(len(mt_pks)):
                if not _eval_row(compiled_filter.ast, mt_refs[i][0]):
                    mt_valid[i] = False
        mt_idx = create_sparse_index(metric_type, index_params)
        mt_idx.build(mt_sparse, valid_mask=mt_valid)
        local_ids, dists = _search_prepared_sparse_index(mt_idx, query_sparse, top_k)
        for qi in range(nq):
            for j in range(top_k):
                lid = int(local_ids[qi, j])
                if lid < 0:
                    break
                per_query[qi].append((float(dists[qi, j]), mt_pks[lid], mt_refs[lid], int(mt_refs[lid][1])))

    # Schema fields the projection drops are not read (the engine converted each, the dense vector
    # included, to Python for every hit); `$meta` and any dynamic column still are.
    unprojected = ({f.name for f in self._schema.fields} - set(projection_plan.response_schema_fields)
                   | {"_seq", "_partition"})
    keys = keys_only(output_fields, self._pk_name)
    results: list[list[dict]] = []
    for qi in range(nq):
        best: dict = {}
        for cand in per_query[qi]:
            _, pk, _, seq = cand  # a segment row's seq is its `_seq` column's value
            if pk not in best or seq > best[pk][0]:
                best[pk] = (seq, cand)
        deduped = [entry[1] for entry in best.values()]
        deduped.sort(key=lambda c: c[0])
        hits: list[dict] = []
        for dist, pk, source, _ in deduped:
            if keys:
                entity: dict = {}
            elif isinstance(source, tuple) and source and isinstance(source[0], dict):
                entity = project_record(source[0], self._schema, projection_plan)
            else:
                tbl, row_i = source
                record = {name: tbl.column(name)[row_i].as_py() for name in tbl.column_names
                          if name not in unprojected}
                entity = project_record(record, self._schema, projection_plan)
            hits.append({"id": pk, "distance": dist, "entity": entity})
            if len(hits) >= top_k:
                break
        results.append(hits)
    return results


original_dense: Any = None
original_sparse: Any = None


def patch() -> None:
    """Route milvus-lite's dense and sparse searches through the functions above (once)."""
    global original_dense, original_sparse
    from milvus_lite.engine import collection

    if original_dense is None:
        original_dense = collection.execute_search_with_index
        original_sparse = collection.Collection._search_sparse
        collection.execute_search_with_index = execute_search_with_index
        collection.Collection._search_sparse = search_sparse
