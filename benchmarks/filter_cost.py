"""What a metadata filter costs milvus-lite per search, by rows: the engine's row-wise evaluator
against the one the gateway installs (storage/lite_filter.py), on the same table, interleaved.

The filter is the largest a tenant may send (4 `nin` conditions of 256 values on one metadata key,
as benchmarks/fairness.py's heavy flood sends it), compiled by the gateway's own compiler with the
tenant boundary in front, over a segment-like table with the chunk schema's big columns (1,000
characters of text and a 384-dim vector a row). CPU seconds of this process, median of `--reps`.

    python benchmarks/filter_cost.py --rows 1000,10000,100000 --engine-rows 1000,10000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gateway.storage import bulk, lite_filter  # noqa: E402
from gateway.storage.filters import compile_filter, filter_from_json, scoped_expression  # noqa: E402

STATUSES = ("open", "pending", "closed", "escalated")


def table(rows: int, rng: random.Random) -> pa.Table:
    return pa.table({
        "id": [f"acme:support:k{i}" for i in range(rows)],
        "tenant": ["acme"] * rows,
        "namespace": ["support"] * rows,
        "text": ["".join(rng.choices("abcdefgh ", k=1000)) for _ in range(rows)],
        "metadata": [json.dumps({"status": rng.choice(STATUSES), "priority": rng.randint(1, 5)}) for _ in range(rows)],
        "dense": pa.array([[rng.gauss(0, 1) for _ in range(384)] for _ in range(rows)],
                          type=pa.list_(pa.float32(), 384)),
    })


def schema():
    from milvus_lite.schema.types import CollectionSchema, DataType, FieldSchema

    return CollectionSchema(fields=[FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=512),
                                    FieldSchema("tenant", DataType.VARCHAR, max_length=256),
                                    FieldSchema("namespace", DataType.VARCHAR, max_length=256),
                                    FieldSchema("text", DataType.VARCHAR, max_length=65535),
                                    FieldSchema("metadata", DataType.JSON),
                                    FieldSchema("dense", DataType.FLOAT_VECTOR, dim=384)])


def cpu(function, compiled, data, reps: int) -> tuple[float, list[bool]]:
    times = []
    for _ in range(reps):
        started = time.process_time()
        result = function(compiled, data).to_pylist()
        times.append(time.process_time() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1000,10000,100000")
    parser.add_argument("--engine-rows", default="1000,10000", help="row counts the engine's evaluator runs at too")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from milvus_lite.search.filter import compile_filter as engine_compile

    assert bulk.patch_engine()
    user = filter_from_json({"and": [{"field": "metadata.status", "op": "nin", "value": [f"s{c}-{v}" for v in range(256)]}
                                     for c in range(4)]})
    expression = scoped_expression("acme", "support", compile_filter(user, ["status"]))
    rng = random.Random(7)
    engine_rows = {int(r) for r in args.engine_rows.split(",") if r}
    for rows in (int(r) for r in args.rows.split(",")):
        data = table(rows, rng)
        compiled = engine_compile(expression, schema())
        row = {"rows": rows, "backend": compiled.backend}
        gateway_s, got = cpu(lite_filter.evaluate_python, compiled, data, args.reps)
        row["gateway_ms"] = round(gateway_s * 1000, 1)
        if rows in engine_rows:
            engine_s, want = cpu(lite_filter.engine_evaluate, engine_compile(expression, schema()), data, 1)
            assert got == want, "the evaluators disagree"
            row.update(engine_ms=round(engine_s * 1000, 1), ratio=round(engine_s / gateway_s, 1))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
