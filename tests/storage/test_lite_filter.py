"""The row-wise filter evaluator reading only a filter's own columns matches milvus-lite's on the same
rows: JSON paths, `in` lists, Kleene nulls, documents that are not objects, and a real collection."""

import json
import random

import pyarrow as pa
from milvus_lite.db import MilvusLite
from milvus_lite.schema.types import CollectionSchema, DataType, FieldSchema
from milvus_lite.search.filter import compile_filter, evaluate
from milvus_lite.search.filter.eval import python_backend

from gateway.storage import bulk, lite_filter

DIM = 4
DOCUMENTS = [
    {"status": "open", "n": 1, "arr": [1, 2], "k": {"x": 3}},
    {"status": "closed", "n": 2, "arr": [], "k": {"x": "3"}},
    {"status": "s0-7", "n": 3.0},
    {"status": None, "arr": [2]},
    {"n": [1]},
    {},
]
# Raw column values beside the documents: JSON null, a number, a string that is itself a JSON
# document (path access must not see inside it), a string, invalid JSON, an array, and no value.
ODD = ["null", "5", json.dumps(json.dumps({"status": "open"})), '"open"', "{", "[1, 2]", None]
EXPRESSIONS = [
    # A metadata `nin` and `in` as storage/filters.py writes them: an OR of equalities.
    'not (metadata["status"] == "s0-1" or metadata["status"] == "s0-7" or metadata["status"] == "closed")',
    '(metadata["status"] == "open" or metadata["status"] == "closed") and '
    '(metadata["n"] == 1 or metadata["n"] == 2 or metadata["n"] == 3)',
    'not (metadata["status"] == "open") or tag in [1, 2]',
    'not (metadata["k"]["x"] == 3)',
    '(metadata["arr"][0] == 1 or metadata["arr"][0] == 2)',
    '(metadata["arr"] == 1 or metadata["arr"] == 2) or tag == 4',
    '(metadata["n"] == 1 or metadata["n"] == true or metadata["n"] == 3.0)',
    # ORs that are not one subject's equalities stay the engine's.
    '(metadata["status"] == "open" or metadata["n"] == 2)',
    '(metadata["status"] == "open" or metadata["status"] != "closed")',
    'tag not in [0] and metadata["status"] != "closed"',
    'metadata["status"] is null',
    'text like "a%" and metadata["n"] >= 2',
    'array_contains(metadata["arr"], 2)',
    'tag in [0, 3] or (tag == 1 or tag == 2) or metadata["n"] == 9',
]


def _schema() -> CollectionSchema:
    return CollectionSchema(fields=[FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=32),
                                    FieldSchema("tag", DataType.INT64),
                                    FieldSchema("text", DataType.VARCHAR, max_length=64),
                                    FieldSchema("metadata", DataType.JSON),
                                    FieldSchema("dense", DataType.FLOAT_VECTOR, dim=DIM)])


def _values(rng: random.Random, count: int) -> list[str | None]:
    values = [json.dumps(rng.choice(DOCUMENTS)) for _ in range(count)]
    return values + ODD


def test_the_evaluator_matches_the_engines_over_every_expression_and_odd_document():
    assert bulk.patch_engine() and python_backend.evaluate_python is lite_filter.evaluate_python
    rng = random.Random(5)
    metadata = _values(rng, 60)
    table = pa.table({"id": [f"k{i}" for i in range(len(metadata))],
                      "tag": [rng.randint(0, 4) for _ in metadata],
                      "text": [rng.choice(["alpha", "beta", "apple"]) for _ in metadata],
                      "metadata": metadata,
                      "dense": [[rng.gauss(0, 1) for _ in range(DIM)] for _ in metadata]})
    schema = _schema()
    columnar = 0
    for source in EXPRESSIONS:
        compiled = compile_filter(source, schema)
        assert compiled.backend == "python", source
        want = lite_filter.engine_evaluate(compiled, table).to_pylist()
        for _ in range(2):  # the second run reads the member sets kept on the filter
            assert lite_filter.evaluate_python(compiled, table).to_pylist() == want, source
        assert evaluate(compiled, table.to_batches()[0]).to_pylist() == want, source
        assert lite_filter.evaluate_python(compiled, table.slice(0, 0)).to_pylist() == []
        assert 0 < sum(want) < len(want) or source == 'metadata["status"] is null', source
        columnar += compiled.__dict__.get("_columnar", True)
        # The row-wise interpreter the column-wise evaluation falls back to answers the same.
        row_wise = compile_filter(source, schema)
        object.__setattr__(row_wise, "_columnar", False)
        assert lite_filter.evaluate_python(row_wise, table).to_pylist() == want, source
    assert 0 < columnar < len(EXPRESSIONS)  # both evaluations were compared


def test_only_the_filters_own_columns_are_read_and_only_path_bases_are_parsed():
    schema = _schema()
    named, parsed = lite_filter.read_columns(compile_filter(
        'not (metadata["status"] == "a") and tag in [1] and text like "x%"', schema).ast)
    assert (named, parsed) == ({"metadata", "tag", "text"}, {"metadata"})
    # A JSON column also read whole keeps its raw value for that reading.
    named, parsed = lite_filter.read_columns(compile_filter(
        'metadata["status"] == "a" or metadata is null', schema).ast)
    assert (named, parsed) == ({"metadata"}, set())


def test_a_metadata_not_in_filter_on_a_collection_returns_what_the_engine_did(tmp_path):
    assert bulk.patch_engine()
    rng = random.Random(9)
    db = MilvusLite(str(tmp_path / "db"))
    try:
        collection = db.create_collection("c", _schema())
        rows = [{"id": f"k{i:03d}", "tag": i % 5, "text": "alpha", "metadata": rng.choice(DOCUMENTS),
                 "dense": [rng.gauss(0, 1) for _ in range(DIM)]} for i in range(120)]
        collection.insert(rows[:80])
        collection.flush()
        collection.insert(rows[80:])  # a segment and the memtable
        expression = " and ".join("not (" + " or ".join(f'metadata["status"] == "s{c}-{v}"' for v in range(256)) + ")"
                                  for c in range(4)) + ' and not (metadata["status"] == "closed")'

        got = sorted(r["id"] for r in collection.query(expression, output_fields=["id"]))
        want = sorted(r["id"] for r in rows
                      if r["metadata"].get("status") is not None
                      and not str(r["metadata"]["status"]).startswith("s") and r["metadata"]["status"] != "closed")
        assert got == want and got
    finally:
        db.close()
