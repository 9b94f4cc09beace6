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
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gateway.errors import InvalidFilter, allowed

Scalar = str | int | float | bool
FilterValue = Scalar | tuple[Scalar, ...]

# Top-level chunk fields a client may filter on. tenant and namespace are deliberately absent:
# the boundary is the server's, never the request's.
FILTERABLE_FIELDS: frozenset[str] = frozenset(
    {"source_id", "chunk_id", "title", "source_url", "source_path", "content_hash",
     "created_at", "updated_at"}
)
METADATA_PREFIX = "metadata."
MAX_NODES = 64
MAX_IN_VALUES = 1024
_METADATA_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# milvus-lite's string lexer knows only \" \' \\ \n \r \t; other control characters (and lone
# surrogates, which cannot be sent over gRPC) are refused rather than mangled.
_UNSAFE_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


class Op(StrEnum):
    EQ = "eq"
    NE = "ne"
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    IN = "in"
    NIN = "nin"


_COMPARATORS = {Op.EQ: "==", Op.NE: "!=", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
_LIST_OPS = {Op.IN: "in", Op.NIN: "not in"}


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


def literal(value: Scalar) -> str:
    """Render one value as a Milvus expression literal, or raise InvalidFilter."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidFilter(f"filter value {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        if _UNSAFE_CHARS.search(value):
            raise InvalidFilter(
                f"filter value {value!r} contains a control character or lone surrogate; "
                "allowed: printable text, tab, newline")
        return json.dumps(value, ensure_ascii=False)
    raise InvalidFilter(f"filter value {value!r} has type {type(value).__name__}; "
                        "allowed: string, integer, float, boolean, or a list of those")


def compile_filter(node: FilterNode, metadata_keys: Collection[str] = ()) -> str:
    """Compile a structured filter to an expression over this collection's fields."""
    counter = [0]
    return _compile(node, frozenset(metadata_keys), counter)


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


def _compile(node: FilterNode, metadata_keys: frozenset[str], counter: list[int]) -> str:
    counter[0] += 1
    if counter[0] > MAX_NODES:
        raise InvalidFilter(f"filter has more than {MAX_NODES} nodes; simplify it")
    if isinstance(node, Condition):
        return _condition(node, metadata_keys)
    if isinstance(node, Not):
        return f"not ({_compile(node.child, metadata_keys, counter)})"
    if isinstance(node, (And, Or)):
        if not node.children:
            raise InvalidFilter(f"'{type(node).__name__.lower()}' needs at least one condition")
        joiner = " and " if isinstance(node, And) else " or "
        return joiner.join(f"({_compile(c, metadata_keys, counter)})" for c in node.children)
    raise InvalidFilter(f"unknown filter node {node!r}")


def _field_expression(name: str, metadata_keys: frozenset[str]) -> str:
    if name in FILTERABLE_FIELDS:
        return name
    if name.startswith(METADATA_PREFIX):
        key = name[len(METADATA_PREFIX):]
        if key in metadata_keys and _METADATA_KEY.match(key):
            return f'metadata["{key}"]'
    known = sorted(FILTERABLE_FIELDS) + [METADATA_PREFIX + k for k in sorted(metadata_keys)]
    raise InvalidFilter(f"filter field {name!r} is not filterable here; allowed: {allowed(known)}")


def _condition(cond: Condition, metadata_keys: frozenset[str]) -> str:
    field = _field_expression(cond.field, metadata_keys)
    try:
        op = Op(cond.op)
    except ValueError:
        raise InvalidFilter(f"filter operator {cond.op!r} is unknown; allowed: {allowed(o.value for o in Op)}") from None
    if op in _LIST_OPS:
        values = cond.value if isinstance(cond.value, (tuple, list)) else None
        if values is None:
            raise InvalidFilter(f"operator '{op}' on {cond.field!r} needs a list of values, got {cond.value!r}")
        if not values:
            raise InvalidFilter(f"operator '{op}' on {cond.field!r} needs at least one value")
        if len(values) > MAX_IN_VALUES:
            raise InvalidFilter(f"operator '{op}' on {cond.field!r} has {len(values)} values; at most {MAX_IN_VALUES}")
        if field.startswith("metadata["):
            # milvus-lite accepts `in` only on plain fields; an OR of equalities means the same
            # on every engine.
            either = " or ".join(f"{field} == {literal(v)}" for v in values)
            return f"({either})" if op is Op.IN else f"not ({either})"
        rendered = ", ".join(literal(v) for v in values)
        return f"{field} {_LIST_OPS[op]} [{rendered}]"
    if isinstance(cond.value, (tuple, list)):
        raise InvalidFilter(f"operator '{op}' on {cond.field!r} takes one value, got a list; use 'in' or 'nin'")
    if op not in (Op.EQ, Op.NE) and isinstance(cond.value, bool):
        raise InvalidFilter(f"operator '{op}' on {cond.field!r} cannot compare booleans; allowed: eq, ne")
    return f"{field} {_COMPARATORS[op]} {literal(cond.value)}"


def filter_from_json(data: object) -> FilterNode:
    """A filter from plain JSON: {field, op, value} or exactly one of {and: [...]}, {or: [...]}, {not: {...}}.

    Used for filters written by a query planner; fields are checked later, when compiled.
    """
    if not isinstance(data, dict):
        raise InvalidFilter(f"a filter must be a JSON object, got {type(data).__name__}")
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
            raise InvalidFilter(f"'{shape}' takes a list of filters")
        nodes = tuple(filter_from_json(child) for child in children)
        return And(nodes) if shape == "and" else Or(nodes)
    if shape == "not":
        return Not(filter_from_json(data["not"]))
    field, op, value = data.get("field"), data.get("op"), data.get("value")
    if not isinstance(field, str):
        raise InvalidFilter("a filter condition needs a string 'field'")
    try:
        operator = Op(op)
    except ValueError:
        raise InvalidFilter(f"filter operator {op!r} is unknown; allowed: {allowed(o.value for o in Op)}") from None
    return Condition(field, operator, filter_value(field, value))


def filter_value(field: str, value: object) -> FilterValue:
    """A condition's value from JSON: one scalar, or a list of them (as a tuple)."""
    if isinstance(value, list):
        if not all(isinstance(v, (str, int, float, bool)) for v in value):
            raise InvalidFilter(f"filter value for {field!r} must be a list of strings, numbers or booleans")
        return tuple(value)
    if not isinstance(value, (str, int, float, bool)):
        raise InvalidFilter(f"filter value for {field!r} must be a string, number, boolean or a list of them; "
                            f"got {type(value).__name__ if value is not None else 'null'}")
    return value
