"""milvus-lite's row-wise filter evaluation, converting only the columns a filter reads.

A metadata filter (any condition on a JSON path) is evaluated by milvus-lite 3.2.2 row by row in
Python (`python_backend.evaluate_python`). Per search and segment it turned the whole segment into
Python dicts, every column included (the 384 floats of each row's vector, its text, its BM25 terms),
then walked the expression for each row. milvus-lite takes `in [...]` on plain fields only, so a
metadata `in`/`nin` is sent as an OR of equalities (storage/filters.py): for each row, each value
parsed the row's metadata JSON again and compared once (1,024 parses and comparisons a row for the
largest filter a tenant may send), and a plain field's `in` list was rebuilt as a set for every row.
The heavy flood of benchmarks/fairness.py (4 conditions of 256 values over the demo tickets) spent
53 ms of the store's CPU in each such search, twice a request, holding the store's GIL while other
tenants' searches waited.

Here the same interpreter runs over the columns the filter names only; a JSON column read only
through paths is parsed once per row; an OR of equalities between one field or path and literals is
one set lookup; an `in` list becomes a set once per filter (its members are literals: the grammar
allows nothing else there). Same rows match, with the same Kleene semantics
(tests/storage/test_lite_filter.py compares it with the engine's evaluator on the same tables).
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from typing import Any

import pyarrow as pa

original_evaluate: Any = None
original_eval_row: Any = None


def evaluate_python(compiled: Any, data: pa.Table | pa.RecordBatch) -> pa.BooleanArray:
    """python_backend.evaluate_python (3.2.2) over the filter's own columns, JSON paths parsed once a row."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    columns = compiled.__dict__.get("_columns")
    if columns is None:
        columns = read_columns(compiled.ast)
        object.__setattr__(compiled, "_columns", columns)  # a compiled filter is kept and reused
    named, path_only = columns
    data = data.select([name for name in data.column_names if name in named])
    rows = data.to_pylist()
    parsed = [name for name in path_only if name in data.column_names]
    out = [False] * len(rows)
    for i, row in enumerate(rows):
        for name in parsed:
            row[name] = _parsed(row[name])
        out[i] = bool(eval_row(compiled.ast, row))  # None (Kleene unknown) counts as no match
    return pa.array(out, type=pa.bool_())


def eval_row(node: Any, row: dict) -> Any:
    """The engine's `_eval_row`, with an `in [...]` list's members and an OR of equalities made a set
    once per filter."""
    from milvus_lite.search.filter.ast import InOp, Or

    if type(node) is Or:
        plan = node.__dict__.get("_membership", _UNPLANNED)
        if plan is _UNPLANNED:
            plan = membership(node)
            object.__setattr__(node, "_membership", plan)
        if plan is None:
            return original_eval_row(node, row)
        subject, members = plan
        value = eval_row(subject, row)
        if value is None:
            return None  # every equality is unknown, so is their OR
        try:
            return value in members
        except TypeError:
            return False  # a JSON object or array equals no literal
    if type(node) is InOp:
        members = node.__dict__.get("_members")
        if members is None:
            # ListLit elements are literals, so the set is the same for every row.
            members = {original_eval_row(element, row) for element in node.values.elements}
            object.__setattr__(node, "_members", members)
        value = eval_row(node.field, row)
        if value is None:
            return None
        found = value in members
        return (not found) if node.negate else found
    return original_eval_row(node, row)


_UNPLANNED = object()


def membership(node: Any) -> tuple[Any, frozenset] | None:
    """(subject, literal values) when `node` is an OR (nested or not) of `subject == literal`, each
    with the same field or path as its subject; None otherwise (the engine evaluates it)."""
    from milvus_lite.search.filter.ast import BoolLit, CmpOp, FieldRef, FloatLit, IntLit, Or, PathAccess, StringLit

    literals = (IntLit, FloatLit, StringLit, BoolLit)

    def subject_key(item: Any) -> tuple | None:
        if type(item) is FieldRef:
            return ("field", item.name)
        if type(item) is PathAccess and type(item.base) is FieldRef:
            return ("path", item.base.name, tuple(item.path))
        return None

    subject: Any = None
    key: tuple | None = None
    values: set = set()
    pending = [node]
    while pending:
        item = pending.pop()
        if type(item) is Or:
            pending.extend(item.operands)
            continue
        if type(item) is not CmpOp or item.op != "==":
            return None
        side, value = ((item.left, item.right) if type(item.right) in literals else
                       (item.right, item.left) if type(item.left) in literals else (None, None))
        found = subject_key(side)
        if found is None or (key is not None and found != key):
            return None
        subject, key = (side, found) if key is None else (subject, key)
        values.add(value.value)
    return subject, frozenset(values)


def read_columns(node: Any) -> tuple[set[str], set[str]]:
    """(every column the expression reads, the JSON columns it reads only as the base of a path)."""
    from milvus_lite.search.filter.ast import FieldRef, MetaAccess, PathAccess

    named: set[str] = set()
    bases: set[str] = set()
    direct: set[str] = set()

    def walk(item: Any, under_path: bool) -> None:
        if isinstance(item, (tuple, list)):
            for element in item:
                walk(element, False)
        elif isinstance(item, FieldRef):
            named.add(item.name)
            (bases if under_path else direct).add(item.name)
        elif isinstance(item, MetaAccess):
            named.add("$meta")
        elif isinstance(item, PathAccess):
            walk(item.base, True)
        elif is_dataclass(item):
            for field in fields(item):
                walk(getattr(item, field.name), False)

    walk(node, False)
    return named, bases - direct


def _parsed(value: Any) -> Any:
    """A JSON document's object or array, parsed; anything else as it was (the engine's path access
    parses a string itself, and a document that is a string must stay one string, not be parsed twice)."""
    if not isinstance(value, str):
        return value
    try:
        document = json.loads(value)
    except (json.JSONDecodeError, TypeError, ValueError):
        return value
    return document if isinstance(document, (dict, list)) else value


def patch() -> None:
    """Route milvus-lite's row-wise filter evaluation through the functions above (once)."""
    global original_evaluate, original_eval_row
    from milvus_lite.search.filter import eval as backends
    from milvus_lite.search.filter.eval import python_backend

    if original_evaluate is None:
        original_evaluate = python_backend.evaluate_python
        original_eval_row = python_backend._eval_row
        # The engine's interpreter recurses through this module name, so nested `in` lists use it too.
        python_backend._eval_row = eval_row
        python_backend.evaluate_python = evaluate_python
        backends.evaluate_python = evaluate_python
