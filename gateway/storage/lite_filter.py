"""milvus-lite's evaluation of filters on JSON paths: column by column, over the filter's own columns.

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

Here an expression made of AND, OR, NOT, comparisons, `in`, `is null` and boolean literals over
fields and paths into fields is evaluated a node at a time over whole columns: each column the
filter names is converted once, a JSON column parsed once a row (and each path read once), an OR of
equalities between one field or path and literals is one set lookup a row, and the Kleene truth
values are combined with numpy (false < unknown < true: AND is the minimum, OR the maximum). Any
other node (LIKE, arithmetic, `$meta`, text_match, array and geometry functions) runs the engine's
own interpreter row by row, over the filter's columns only, with the same set lookups. The same rows
match (tests/storage/test_lite_filter.py compares both paths with the engine's evaluator). The sets
and the list of a filter's columns are kept on the compiled filter, which milvus-lite keeps in a
256-entry LRU per collection: at most one set of the filter's own literals (1,024 by the filter caps)
beside the literal nodes it already holds. Columns are converted per call and dropped after it. The
largest filter over 1,000 rows: 2,956 ms of CPU in the engine, 2.8 ms here; 100,000 rows: 279 ms
(`python benchmarks/filter_cost.py`, docs/benchmarks.md).
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from functools import cache
from typing import Any

import numpy as np
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
    if compiled.__dict__.get("_columnar", True):
        try:
            return pa.array(truth(compiled.ast, _Columns(data)) == TRUE, type=pa.bool_())
        except _RowWise:
            object.__setattr__(compiled, "_columnar", False)  # a node only the interpreter knows
        except TypeError:
            pass  # the interpreter decides (its `in` raises it for an unhashable value, its AND may not reach it)
    rows = data.to_pylist()
    parsed = [name for name in path_only if name in data.column_names]
    out = [False] * len(rows)
    for i, row in enumerate(rows):
        for name in parsed:
            row[name] = _parsed(row[name])
        out[i] = bool(eval_row(compiled.ast, row))  # None (Kleene unknown) counts as no match
    return pa.array(out, type=pa.bool_())


# Kleene truth values as codes: AND is the minimum, OR the maximum, NOT 2 minus the code.
FALSE, UNKNOWN, TRUE = 0, 1, 2


class _RowWise(Exception):
    """The expression holds a node the column-wise evaluation does not cover."""


class _Columns:
    """A table's columns as Python values, each converted once; JSON columns parsed once a row."""

    def __init__(self, data: pa.Table) -> None:
        self._data = data
        self.rows = data.num_rows
        self._values: dict[str, list] = {}
        self._parsed: dict[str, list] = {}
        self._paths: dict[tuple, list] = {}

    def column(self, name: str) -> list:
        if name not in self._values:
            present = name in self._data.column_names
            self._values[name] = self._data.column(name).to_pylist() if present else [None] * self.rows
        return self._values[name]

    def path(self, name: str, path: tuple) -> list:
        """The engine's PathAccess over a field, for every row."""
        key = (name, path)
        if key not in self._paths:
            if name not in self._parsed:
                self._parsed[name] = [_loaded(value) for value in self.column(name)]
            self._paths[key] = [_walk(value, path) for value in self._parsed[name]]
        return self._paths[key]


_UNPARSABLE = object()


def _loaded(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, TypeError, ValueError):
        return _UNPARSABLE


def _walk(value: Any, path: tuple) -> Any:
    if value is _UNPARSABLE:
        return None
    for part in path:
        if isinstance(part, str):
            if not isinstance(value, dict):
                return None
            value = value.get(part)
        else:
            if not isinstance(value, (list, tuple)) or part < 0 or part >= len(value):
                return None
            value = value[part]
        if value is None:
            return None
    return value


def _codes(results: list) -> np.ndarray:
    return np.fromiter((UNKNOWN if r is None else TRUE if r else FALSE for r in results), dtype=np.int8,
                       count=len(results))


def truth(node: Any, columns: _Columns) -> np.ndarray:
    """The Kleene truth of a boolean expression for every row, as codes: the engine's `_eval_row`
    row by row, computed a node at a time over whole columns. Raises _RowWise for nodes it does not
    cover (the caller then runs the engine's interpreter)."""
    from milvus_lite.search.filter.ast import And, BoolLit, CmpOp, InOp, IsNullOp, Not, Or

    kind = type(node)
    if kind is And:
        return np.minimum.reduce([truth(operand, columns) for operand in node.operands])
    if kind is Or:
        plan = _plan(node)
        if plan is None:
            return np.maximum.reduce([truth(operand, columns) for operand in node.operands])
        subject, members = plan
        return _codes([None if v is None else _member(v, members) for v in _operand(subject, columns)])
    if kind is Not:
        return 2 - truth(node.operand, columns)
    if kind is CmpOp:
        from milvus_lite.search.filter.eval.python_backend import _CMP_OPS

        compare = _CMP_OPS[node.op]
        left, right = _operand(node.left, columns), _operand(node.right, columns)
        return _codes([_compare(compare, a, b) for a, b in zip(left, right)])
    if kind is InOp:
        members = _members(node)
        found = [None if v is None else v in members for v in _operand(node.field, columns)]
        return _codes([r if r is None or not node.negate else not r for r in found])
    if kind is IsNullOp:
        null = [v is None for v in _operand(node.field, columns)]
        return _codes([not n if node.negate else n for n in null])
    if kind is BoolLit:
        return np.full(columns.rows, TRUE if node.value else FALSE, dtype=np.int8)
    raise _RowWise(kind.__name__)


def _operand(node: Any, columns: _Columns) -> list:
    """A value expression's value for every row: a field, a path into a field, or a literal."""
    from milvus_lite.search.filter.ast import FieldRef, PathAccess

    kind = type(node)
    if kind is FieldRef:
        return columns.column(node.name)
    if kind is PathAccess and type(node.base) is FieldRef:
        return columns.path(node.base.name, tuple(node.path))
    if kind in _literal_kinds():
        return [original_eval_row(node, {})] * columns.rows
    raise _RowWise(kind.__name__)


def _compare(compare: Any, left: Any, right: Any) -> bool | None:
    if left is None or right is None:
        return None
    try:
        return compare(left, right)
    except TypeError:
        return None


def _member(value: Any, members: frozenset) -> bool:
    try:
        return value in members
    except TypeError:
        return False  # a JSON object or array equals no literal


@cache
def _literal_kinds() -> frozenset[type]:
    from milvus_lite.search.filter import ast

    return frozenset({ast.IntLit, ast.FloatLit, ast.StringLit, ast.BoolLit, ast.TimestampLit, ast.IntervalLit})


def _plan(node: Any) -> tuple[Any, frozenset] | None:
    plan = node.__dict__.get("_membership", _UNPLANNED)
    if plan is _UNPLANNED:
        plan = membership(node)
        object.__setattr__(node, "_membership", plan)
    return plan


def _members(node: Any) -> set:
    members = node.__dict__.get("_members")
    if members is None:
        # ListLit elements are literals, so the set is the same for every row.
        members = {original_eval_row(element, {}) for element in node.values.elements}
        object.__setattr__(node, "_members", members)
    return members


def engine_evaluate(compiled: Any, data: pa.Table | pa.RecordBatch) -> pa.BooleanArray:
    """milvus-lite's own row-wise evaluator, its interpreter unpatched for the call (to compare with)."""
    from milvus_lite.search.filter.eval import python_backend

    patched, python_backend._eval_row = python_backend._eval_row, original_eval_row
    try:
        return original_evaluate(compiled, data)
    finally:
        python_backend._eval_row = patched


def eval_row(node: Any, row: dict) -> Any:
    """The engine's `_eval_row`, with an `in [...]` list's members and an OR of equalities made a set
    once per filter."""
    from milvus_lite.search.filter.ast import InOp, Or

    if type(node) is Or:
        plan = _plan(node)
        if plan is None:
            return original_eval_row(node, row)
        subject, members = plan
        value = eval_row(subject, row)
        if value is None:
            return None  # every equality is unknown, so is their OR
        return _member(value, members)
    if type(node) is InOp:
        members = _members(node)
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
