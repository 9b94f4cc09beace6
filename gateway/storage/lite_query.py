"""milvus-lite's query, a key-ordered page above all, with the row validity kept per segment set.

A client pages through a collection by primary key (`MilvusStore._iterate` through pymilvus with
`iterator=True`, as every command beside `gateway serve` reads a scope: ingest's inventory, verify,
compact) with `pk > last` and a limit. milvus-lite 3.2.2 answers each page by deciding, row by row in
Python, which rows of the whole collection are live (`build_valid_mask`), then sorting the matching
ones by key with a Python key function: a whole collection's work per page, so reading 100,000 chunks
took 49 s beside `gateway serve` (10,000 at 2.3 s), hours at a million.

Here a page takes the validity verdict storage/lite_validity.py keeps per set of segments (rebuilt only
when a flush, compaction or flushed delete changes them; the memtable's part applied per call), the
filter as the engine evaluates it (Arrow), and sorts the matching keys with Arrow's `sort_indices`;
only the page's rows are materialised, and of a segment only the asked columns (the engine built each
row with every column, vector included). Same rows, same order, same
dicts (tests/storage/test_lite_query.py compares it with the engine's query). Other queries (no
key order: the delete by filter a server runs, a filtered count) share the validity step and keep
the engine's row order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gateway.storage.lite_validity import dense_masks, projected_columns, segment_row

original_query: Any = None


def query(self: Any, expr: str | None = None, output_fields: list[str] | None = None,
          partition_names: list[str] | None = None, limit: int | None = None, offset: int = 0,
          timezone: str | None = None, order_by_pk: bool = False) -> list[dict]:
    """milvus_lite.engine.collection.Collection.query (3.2.2) with `dense_masks` as its validity, and Arrow's
    sort for `order_by_pk`; without it, rows come in the engine's order (segments, then the memtable)."""
    from milvus_lite.engine.projection import build_projection_plan, project_record
    from milvus_lite.search.assembler import materialize_record
    from milvus_lite.search.filter import evaluate_mask
    from milvus_lite.search.indexed_filter import evaluate_segment_filter

    if expr is not None and not isinstance(expr, str):
        raise TypeError("query() expr must be a string or None")
    self._require_loaded()
    compiled = self._compile_filter(expr, timezone=timezone) if expr else None
    plan = build_projection_plan(output_fields, self._schema, api_kind="query")
    indexed = self._indexed_filter_plan(compiled)
    segments, deltas = self._read_snapshot()
    wanted = set(partition_names) if partition_names else None
    in_scope = [s for s in segments if s.num_rows > 0 and (wanted is None or s.partition in wanted)]
    memtable = self._memtable  # once: a flush replaces it, and the refs below point into this one
    mt_pks, mt_seqs, _vectors, mt_refs, mt_table = memtable.to_search_snapshot(
        vector_field=self._vector_name, partition_names=partition_names, include_table=compiled is not None)
    seg_masks, mt_mask = dense_masks(in_scope, deltas._map, mt_pks, mt_seqs, memtable.delete_index_snapshot())

    keys: list[pa.Array] = []
    sources: list[tuple[Any, Any]] = []  # per part: (segment or memtable, its row refs in key-array order)
    for seg, mask in zip(in_scope, seg_masks):
        if compiled is not None:
            mask = mask & evaluate_segment_filter(seg, compiled, indexed)
        rows = np.flatnonzero(mask)
        if rows.size:
            keys.append(seg.table.column(self._pk_name).take(pa.array(rows, pa.int64())).combine_chunks())
            sources.append((seg, rows))
    if mt_pks:
        if compiled is not None and mt_table is not None:
            mt_mask = mt_mask & evaluate_mask(compiled, mt_table)
        rows = np.flatnonzero(mt_mask)
        if rows.size:
            keys.append(pa.array([mt_pks[i] for i in rows.tolist()], keys[0].type if keys else None))
            sources.append((memtable, [mt_refs[i] for i in rows.tolist()]))
    if not keys:
        return []
    # Live keys are unique (one newest version each), so the order is total, as the engine's sort's.
    total = sum(len(k) for k in keys)
    order = (pc.sort_indices(pa.concat_arrays(keys)).to_numpy().astype(np.int64) if order_by_pk
             else np.arange(total, dtype=np.int64))
    if limit is not None:
        order = order[:offset + limit]
    starts = np.cumsum([0] + [len(k) for k in keys], dtype=np.int64)
    picked = order[offset:]
    parts = np.searchsorted(starts, picked, side="right") - 1
    records: list[dict | None] = [None] * len(picked)
    # Without dynamic fields, a segment's rows are read as the asked columns only, all at once (Arrow);
    # the engine's materialisation reads every column of each row (a 384-d vector as Python floats).
    names = None if plan.engine_fields is None or plan.include_raw_meta else list(
        dict.fromkeys([self._pk_name, *plan.engine_fields]))
    for part in np.unique(parts).tolist():
        source, refs = sources[part]
        slots = np.flatnonzero(parts == part)
        local = picked[slots] - starts[part]
        if source is memtable or names is None:
            rows = [materialize_record((source, refs[i] if source is memtable else int(refs[i])))
                    for i in local.tolist()]
        else:
            rows = source.table.select(names).take(pa.array(refs[local], pa.int64())).to_pylist()
        for slot, row in zip(slots.tolist(), rows):
            records[slot] = row
    return [project_record(record, self._schema, plan) for record in records]  # type: ignore[arg-type]


original_servicer_query: Any = None
original_get: Any = None


def get(self: Any, pks: list[Any], partition_names: list[str] | None = None, expr: str | None = None,
        output_fields: list[str] | None = None, timezone: str | None = None) -> list[dict]:
    """milvus_lite.engine.collection.Collection.get (3.2.2), reading of a segment's row only the asked
    columns (the engine built each row with every column, the vector's floats included, then projected
    it): a fill of the ten rows a search returns, which the servicer answers with `get` (`id in [...]`).
    A get with a filter, or with every field asked, is the engine's."""
    from milvus_lite.engine.projection import build_projection_plan, project_record

    read = projected_columns(output_fields, self._pk_name)
    if expr is not None or read is None:
        return original_get(self, pks, partition_names=partition_names, expr=expr, output_fields=output_fields,
                            timezone=timezone)
    if not isinstance(pks, list):
        raise TypeError(f"pks must be a list, got {type(pks).__name__}")
    self._require_loaded()
    partition_filter = set(partition_names) if partition_names else None
    plan = build_projection_plan(output_fields, self._schema, api_kind="get")
    segments, deltas = self._read_snapshot()
    out: list[dict] = []
    for pk in pks:
        record = self._memtable.get(pk, partition_filter=partition_filter)
        if record is None:
            if self._memtable.is_locally_deleted(pk):
                continue
            best_seq, best = -1, None
            for segment in segments:
                if partition_filter is not None and segment.partition not in partition_filter:
                    continue
                row = segment.find_row(pk)
                if row is not None and int(segment.seqs[row]) > best_seq:
                    best_seq, best = int(segment.seqs[row]), (segment, row)
            if best is None or deltas.is_deleted(pk, best_seq):
                continue
            record = segment_row(*best, read)
        out.append(project_record(record, self._schema, plan))
    return out


def servicer_query(self: Any, request: Any, context: Any) -> Any:
    """milvus-lite's gRPC Query, except a `count(*)` with a filter: the engine answered it by building every
    matching row as a dict of all its fields and counting the list (about 15 KB a 384-d row: a served
    `count` of a million chunks took the server past 19 GB). It is counted here from the live, matching
    candidates (storage/bulk.py `count`), reading no row."""
    from milvus_lite.adapter.grpc import servicer as grpc
    from milvus_lite.exceptions import MilvusLiteError

    from gateway.storage.bulk import count

    timezone = grpc._extract_timezone(request.query_params)
    if list(request.output_fields) != ["count(*)"] or not request.expr or request.partition_names or timezone:
        return original_servicer_query(self, request, context)
    try:
        col = self._get_collection(request, context)
        rows = count(col, request.expr)
    except MilvusLiteError as e:
        return grpc.milvus_pb2.QueryResults(status=grpc.common_pb2.Status(**grpc.to_status_kwargs(e)))
    field = grpc.schema_pb2.FieldData()
    field.field_name = "count(*)"
    field.type = 5  # INT64, as the engine's own count answer
    field.scalars.long_data.data.append(rows)
    return grpc.milvus_pb2.QueryResults(status=grpc.common_pb2.Status(**grpc.success_status_kwargs()),
                                        fields_data=[field], collection_name=col.name, output_fields=["count(*)"])


def patch() -> None:
    """Route milvus-lite's query through `query`, its get through `get`, and its gRPC filtered count through `servicer_query` (once)."""
    global original_query, original_servicer_query, original_get
    from milvus_lite.adapter.grpc.servicer import MilvusServicer
    from milvus_lite.engine.collection import Collection

    if original_query is None:
        original_query = Collection.query
        Collection.query = query
        original_get = Collection.get
        Collection.get = get
        original_servicer_query = MilvusServicer.Query
        MilvusServicer.Query = servicer_query
