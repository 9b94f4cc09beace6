"""Structured filters compiled to Milvus boolean expressions.

Clients never send expressions: they send (field, operator, value) conditions combined with
and / or / not. Field names are checked against the collection's filterable fields and
declared metadata keys, operators come from a closed set, and values are rendered as literals
here (milvus-lite 3.2 does not support ``filter_params`` templating, so the compiler is the one
place values become expression text). The tenant and namespace boundary is added by
:func:`scoped_expression` alone, from server-side values.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import TypeVar

from gateway.errors import InvalidFilter, allowed

Scalar = str | int | float | bool
FilterValue = Scalar | tuple[Scalar, ...]

# Top-level chunk fields a client may filter on, by the type each is stored as: a comparison
# across types is an engine error (STORAGE_UNAVAILABLE) rather than the client's, so it is refused
# here; metadata is JSON and compares any scalar. tenant and namespace are deliberately absent:
# the boundary is the server's, never the request's.
TEXT_FIELDS: frozenset[str] = frozenset(
    {"source_id", "chunk_id", "title", "source_url", "source_path", "content_hash"})
TIME_FIELDS: frozenset[str] = frozenset({"created_at", "updated_at"})  # epoch milliseconds, int64
FILTERABLE_FIELDS: frozenset[str] = TEXT_FIELDS | TIME_FIELDS
METADATA_PREFIX = "metadata."
# Caps on one filter, far above what a person or a query planner writes, so that no filter costs
# seconds to convert, compile or search (63 x `metadata IN [1024 values]` took 18 s and 259 MiB).
# Going over any of them is INVALID_FILTER, like every other problem with a filter.
MAX_NODES = 64  # conditions plus and/or/not nodes
MAX_DEPTH = 8  # levels of nesting; a lone condition is one level, each and/or/not adds one
MAX_VALUES = 1024  # values across the whole filter, each value of an in/nin list counted
# Milvus integers (and JSON numbers in metadata) are int64; a larger literal fails inside Milvus.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Values quoted in error messages are cut to this many characters: a message names the value
# without echoing a megabyte back.
_SHOWN_CHARS = 60
# Matched whole (fullmatch): `$` alone would let a key end in a newline.
_METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# milvus-lite's string lexer knows only \" \' \\ \n \r \t; other control characters (and lone
# surrogates, which cannot be sent over gRPC) are refused rather than mangled.
_UNSAFE_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
# A time field's value as text: an ISO 8601 date (midnight UTC) or a date-time with its offset;
# a date-time without one is refused, since the server's zone is no answer to "when".
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_TIME_VALUES = ("an integer (epoch milliseconds), an ISO 8601 date (2026-03-01, midnight UTC) "
                "or date-time with an offset (2026-03-01T12:00:00Z)")
# LIKE's wildcards and its escape character: a client's `%` or `_` is that character, never a
# wildcard (milvus-lite 3.2 reads `\%` and `\_` in a pattern as the characters themselves).
_LIKE_SPECIAL = re.compile(r"([\\%_])")


class Op(StrEnum):
    EQ = "eq"
    NE = "ne"
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    IN = "in"
    NIN = "nin"
    CONTAINS = "contains"
    PREFIX = "prefix"
    EXISTS = "exists"
    IS_NULL = "is_null"
    CONTAINS_ANY = "contains_any"
    CONTAINS_ALL = "contains_all"


_COMPARATORS = {Op.EQ: "==", Op.NE: "!=", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
_LIST_OPS = {Op.IN: "in", Op.NIN: "not in"}
# Array operators read a JSON list in metadata (json_contains_any / json_contains_all).
_ARRAY_OPS = {Op.CONTAINS_ANY: "json_contains_any", Op.CONTAINS_ALL: "json_contains_all"}
# `contains` and `prefix` are LIKE patterns around the client's text.
_PATTERNS = {Op.CONTAINS: "%{}%", Op.PREFIX: "{}%"}
# What each top-level field kind can be asked; metadata (JSON) can be asked everything. The
# columns are never null, so exists / is_null mean something on metadata keys only.
_ORDERED_OPS = frozenset({Op.EQ, Op.NE, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.IN, Op.NIN})
TEXT_OPS: frozenset[Op] = _ORDERED_OPS | {Op.CONTAINS, Op.PREFIX}
TIME_OPS: frozenset[Op] = _ORDERED_OPS


@dataclass(frozen=True, slots=True)
class Condition:
    """`field op value`; metadata keys are addressed as ``metadata.<key>``."""

    field: str
    op: Op
    value: FilterValue


@dataclass(frozen=True, slots=True)
class And:
    children: tuple[FilterNode, ...]


@dataclass(frozen=True, slots=True)
class Or:
    children: tuple[FilterNode, ...]


@dataclass(frozen=True, slots=True)
class Not:
    child: FilterNode


FilterNode = Condition | And | Or | Not

T = TypeVar("T")


# reprlib bounds the work too: a value nested a thousand lists deep is shown three levels deep.
_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxlong = _REPR.maxother = _SHOWN_CHARS


def shown(value: object) -> str:
    """repr(value) cut to a length fit for an error message."""
    text = _REPR.repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def check_size(root: T, parts: Callable[[T], tuple[Sequence[T], int]]) -> None:
    """Refuse a filter over MAX_DEPTH, MAX_NODES or MAX_VALUES, walking it without recursion.

    `parts(node)` gives a node's children and how many values the node itself holds. Run before
    any recursive conversion: a 1,000-deep filter is refused after MAX_DEPTH steps.
    """
    nodes, values = 1, 0
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidFilter(f"filter is nested more than {MAX_DEPTH} levels deep; "
                                f"allowed: at most {MAX_DEPTH} levels (a condition alone is one)")
        children, held = parts(node)
        nodes += len(children)
        values += held
        if nodes > MAX_NODES:
            raise InvalidFilter(f"filter has more than {MAX_NODES} nodes; "
                                f"allowed: at most {MAX_NODES} conditions and and/or/not nodes in all")
        if values > MAX_VALUES:
            raise InvalidFilter(f"filter has more than {MAX_VALUES} values; "
                                f"allowed: at most {MAX_VALUES} in all, each value of an in/nin list counted")
        stack.extend((child, depth + 1) for child in children)


def literal(value: Scalar) -> str:
    """Render one value as a Milvus expression literal, or raise InvalidFilter."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidFilter(f"filter value {shown(value)} is out of range; "
                                f"allowed: integers from {INT64_MIN} to {INT64_MAX}")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidFilter(f"filter value {value!r} is not a finite number; allowed: finite numbers")
        return repr(value)
    if isinstance(value, str):
        if _UNSAFE_CHARS.search(value):
            raise InvalidFilter(
                f"filter value {shown(value)} contains a control character or lone surrogate; "
                "allowed: printable text, tab, newline")
        return json.dumps(value, ensure_ascii=False)
    raise InvalidFilter(f"filter value {shown(value)} has type {type(value).__name__}; "
                        "allowed: string, integer, float, boolean, or a list of those")


def compile_filter(node: FilterNode, metadata_keys: Collection[str] = ()) -> str:
    """Compile a structured filter to an expression over this collection's fields."""
    check_size(node, _node_parts)
    return _compile(node, frozenset(metadata_keys))


def scoped_expression(tenant: str, namespace: str | Sequence[str], user_expression: str | None) -> str:
    """The one place the tenant and namespace boundary is added to every expression."""
    if isinstance(namespace, str):
        boundary = f"tenant == {literal(tenant)} and namespace == {literal(namespace)}"
    else:
        names = ", ".join(literal(n) for n in namespace)
        boundary = f"tenant == {literal(tenant)} and namespace in [{names}]"
    if user_expression:
        return f"{boundary} and ({user_expression})"
    return boundary


def _node_parts(node: FilterNode) -> tuple[Sequence[FilterNode], int]:
    if isinstance(node, Condition):
        return (), len(node.value) if isinstance(node.value, (tuple, list)) else 1
    if isinstance(node, Not):
        return (node.child,), 0
    if isinstance(node, (And, Or)):
        return node.children, 0
    raise InvalidFilter(f"unknown filter node {shown(node)}; allowed: Condition, And, Or, Not")


def _compile(node: FilterNode, metadata_keys: frozenset[str]) -> str:
    if isinstance(node, Condition):
        return _condition(node, metadata_keys)
    if isinstance(node, Not):
        return f"not ({_compile(node.child, metadata_keys)})"
    if not node.children:
        raise InvalidFilter(f"'{type(node).__name__.lower()}' needs at least one condition")
    joiner = " and " if isinstance(node, And) else " or "
    return joiner.join(f"({_compile(c, metadata_keys)})" for c in node.children)


def _field_expression(name: str, metadata_keys: frozenset[str]) -> str:
    if name in FILTERABLE_FIELDS:
        return name
    if name.startswith(METADATA_PREFIX):
        key = name[len(METADATA_PREFIX):]
        if key in metadata_keys and _METADATA_KEY.fullmatch(key):
            return f'metadata["{key}"]'
    known = [*FILTERABLE_FIELDS, *(METADATA_PREFIX + k for k in metadata_keys)]
    raise InvalidFilter(f"filter field {shown(name)} is not filterable here; allowed: {allowed(known)}")


def _condition(cond: Condition, metadata_keys: frozenset[str]) -> str:
    field = _field_expression(cond.field, metadata_keys)
    try:
        op = Op(cond.op)
    except ValueError:
        raise InvalidFilter(f"filter operator {shown(cond.op)} is unknown; "
                            f"allowed: {allowed(o.value for o in Op)}") from None
    _check_op(cond.field, op)
    value = _time_value(cond) if cond.field in TIME_FIELDS else cond.value
    _check_kind(cond)
    if op in _LIST_OPS or op in _ARRAY_OPS:
        values = value if isinstance(value, (tuple, list)) else None
        if values is None:
            raise InvalidFilter(f"operator '{op}' on {cond.field!r} needs a list of values, got {shown(value)}")
        if not values:
            raise InvalidFilter(f"operator '{op}' on {cond.field!r} needs at least one value, got []")
        rendered = ", ".join(literal(v) for v in values)
        if op in _ARRAY_OPS:
            return f"{_ARRAY_OPS[op]}({field}, [{rendered}])"
        if field.startswith("metadata["):
            # milvus-lite accepts `in` only on plain fields; an OR of equalities means the same
            # on every engine.
            either = " or ".join(f"{field} == {literal(v)}" for v in values)
            return f"({either})" if op is Op.IN else f"not ({either})"
        return f"{field} {_LIST_OPS[op]} [{rendered}]"
    if isinstance(value, (tuple, list)):
        raise InvalidFilter(f"operator '{op}' on {cond.field!r} takes one value, got a list; "
                            "use 'in', 'nin', 'contains_any' or 'contains_all'")
    if op in _PATTERNS:
        if not isinstance(value, str) or not value:
            raise InvalidFilter(f"operator '{op}' on {cond.field!r} needs text of at least one character, "
                                f"got {shown(value)}")
        pattern = _PATTERNS[op].format(_LIKE_SPECIAL.sub(r"\\\1", value))
        return f"{field} like {literal(pattern)}"
    if op is Op.EXISTS or op is Op.IS_NULL:
        if not isinstance(value, bool):
            raise InvalidFilter(f"operator '{op}' on {cond.field!r} takes true or false, got {shown(value)}")
        # A key holding JSON null does not exist either: milvus-lite's `exists` is `is not null`.
        present = value if op is Op.EXISTS else not value
        return f"{field} is not null" if present else f"{field} is null"
    if op not in (Op.EQ, Op.NE) and isinstance(value, bool):
        raise InvalidFilter(f"operator '{op}' on {cond.field!r} cannot compare booleans; allowed: eq, ne")
    return f"{field} {_COMPARATORS[op]} {literal(value)}"


def _check_op(field: str, op: Op) -> None:
    """Text fields take ordering and text operators, time fields ordering ones, metadata any."""
    if field in TEXT_FIELDS:
        ops, kind = TEXT_OPS, "a text field"
    elif field in TIME_FIELDS:
        ops, kind = TIME_OPS, "a time field"
    else:
        return
    if op not in ops:
        raise InvalidFilter(f"operator '{op}' does not apply to {field!r} ({kind}); "
                            f"allowed on it: {allowed(o.value for o in ops)}")


def _time_value(cond: Condition) -> FilterValue:
    """A time field's value with each ISO 8601 date or date-time as epoch milliseconds."""
    if isinstance(cond.value, (tuple, list)):
        return tuple(_epoch_ms(cond.field, v) for v in cond.value)
    return _epoch_ms(cond.field, cond.value)


def _epoch_ms(field: str, value: Scalar) -> Scalar:
    if not isinstance(value, str):
        return value
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        when = None
    if when is not None and when.tzinfo is None and _DATE.fullmatch(value):
        when = when.replace(tzinfo=timezone.utc)
    if when is None or when.tzinfo is None:
        raise InvalidFilter(f"filter field {field!r} cannot be compared with {shown(value)}; "
                            f"allowed: {_TIME_VALUES}")
    return (when - _EPOCH) // timedelta(milliseconds=1)


def _check_kind(cond: Condition) -> None:
    """Text fields take strings; time fields take integers (epoch milliseconds) or ISO 8601 text."""
    values = cond.value if isinstance(cond.value, (tuple, list)) else (cond.value,)
    if cond.field in TEXT_FIELDS:
        wrong = next((v for v in values if not isinstance(v, str)), None)
        expected = "a string"
    elif cond.field in TIME_FIELDS:
        wrong = next((v for v in values if isinstance(v, bool) or not isinstance(v, (int, str))), None)
        expected = _TIME_VALUES
    else:
        return
    if wrong is not None:
        raise InvalidFilter(f"filter field {cond.field!r} cannot be compared with {shown(wrong)}; "
                            f"allowed: {expected}")


def filter_from_json(data: object) -> FilterNode:
    """A filter from plain JSON: {field, op, value} or exactly one of {and: [...]}, {or: [...]}, {not: {...}}.

    Used for filters written by a query planner; fields are checked later, when compiled.
    """
    check_size(data, _json_parts)
    return _from_json(data)


def _json_parts(data: object) -> tuple[Sequence[object], int]:
    # Shape errors are left to _from_json; this walk only measures what it can.
    if not isinstance(data, dict):
        return (), 0
    if "and" in data or "or" in data or "not" in data:
        children = [data["not"]] if "not" in data else data.get("and", data.get("or"))
        return (children if isinstance(children, list) else ()), 0
    value = data.get("value")
    return (), len(value) if isinstance(value, list) else 1


def _from_json(data: object) -> FilterNode:
    if not isinstance(data, dict):
        raise InvalidFilter(f"a filter must be a JSON object, got {_type_name(data)} {shown(data)}")
    shapes = [key for key in ("and", "or", "not") if key in data]
    if "field" in data or "op" in data:
        shapes.append("condition")
    if len(shapes) != 1:
        raise InvalidFilter(f"a filter node must be exactly one of: condition (field, op, value), and, or, not; "
                            f"got {', '.join(shapes) or 'nothing'}")
    shape = shapes[0]
    if shape in ("and", "or"):
        children = data[shape]
        if not isinstance(children, list):
            raise InvalidFilter(f"'{shape}' takes a list of filters, got {_type_name(children)} {shown(children)}")
        nodes = tuple(_from_json(child) for child in children)
        return And(nodes) if shape == "and" else Or(nodes)
    if shape == "not":
        return Not(_from_json(data["not"]))
    field, op, value = data.get("field"), data.get("op"), data.get("value")
    if not isinstance(field, str):
        raise InvalidFilter(f"a filter condition needs a string 'field', got {_type_name(field)} {shown(field)}")
    try:
        operator = Op(op)
    except ValueError:
        raise InvalidFilter(f"filter operator {shown(op)} is unknown; "
                            f"allowed: {allowed(o.value for o in Op)}") from None
    return Condition(field, operator, filter_value(field, value))


_VALUE_TYPES = "allowed: a string, number or boolean, or a list of those"


def filter_value(field: str, value: object) -> FilterValue:
    """A condition's value from JSON: one scalar, or a list of them (as a tuple)."""
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, (str, int, float, bool)):
                raise InvalidFilter(f"filter value for {shown(field)} is a list holding {_type_name(item)} "
                                    f"{shown(item)}; {_VALUE_TYPES}")
        return tuple(value)
    if not isinstance(value, (str, int, float, bool)):
        raise InvalidFilter(f"filter value for {shown(field)} is {_type_name(value)} {shown(value)}; {_VALUE_TYPES}")
    return value


def _type_name(value: object) -> str:
    """JSON's name for a Python value's type, as a client wrote it."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__
