import json
import re

import pytest

from gateway.errors import ErrorCode, InvalidFilter
from gateway.storage.filters import (
    FILTERABLE_FIELDS,
    INT64_MAX,
    INT64_MIN,
    MAX_DEPTH,
    MAX_NODES,
    MAX_VALUES,
    And,
    Condition,
    Not,
    Op,
    Or,
    check_size,
    compile_filter,
    filter_from_json,
    filter_value,
    literal,
    scoped_expression,
    shown,
)
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope

ALL_FIELDS = ["chunk_id", "content_hash", "created_at", "source_id", "source_path", "source_url", "title",
              "updated_at"]


def nested(depth: int, kind: type = And) -> And | Or | Not:
    """A filter `depth` levels deep: (depth - 1) combinators around one condition."""
    node = Condition("title", Op.EQ, "x")
    for _ in range(depth - 1):
        node = Not(node) if kind is Not else kind((node,))
    return node


def nested_json(depth: int, key: str = "and") -> dict:
    node: dict = {"field": "title", "op": "eq", "value": "x"}
    for _ in range(depth - 1):
        node = {key: node} if key == "not" else {key: [node]}
    return node


# -- every operator x every value type, compiled exactly -------------------------------------------

@pytest.mark.parametrize(("op", "value", "expected"), [
    (Op.EQ, "a", 'title == "a"'),
    (Op.EQ, 7, "title == 7"),
    (Op.EQ, -7, "title == -7"),
    (Op.EQ, 0.25, "title == 0.25"),
    (Op.EQ, True, "title == true"),
    (Op.EQ, False, "title == false"),
    (Op.NE, "a", 'title != "a"'),
    (Op.NE, 7, "title != 7"),
    (Op.NE, 0.25, "title != 0.25"),
    (Op.NE, True, "title != true"),
    (Op.NE, False, "title != false"),
    (Op.GT, "a", 'title > "a"'),
    (Op.GT, 7, "title > 7"),
    (Op.GT, 0.25, "title > 0.25"),
    (Op.GTE, "a", 'title >= "a"'),
    (Op.GTE, 7, "title >= 7"),
    (Op.GTE, 0.25, "title >= 0.25"),
    (Op.LT, "a", 'title < "a"'),
    (Op.LT, 7, "title < 7"),
    (Op.LT, 0.25, "title < 0.25"),
    (Op.LTE, "a", 'title <= "a"'),
    (Op.LTE, 7, "title <= 7"),
    (Op.LTE, 0.25, "title <= 0.25"),
    (Op.IN, ("a", "b"), 'title in ["a", "b"]'),
    (Op.IN, (1, -2), "title in [1, -2]"),
    (Op.IN, (0.5, 1.5), "title in [0.5, 1.5]"),
    (Op.IN, (True, False), "title in [true, false]"),
    (Op.IN, ("a",), 'title in ["a"]'),
    (Op.NIN, ("a", "b"), 'title not in ["a", "b"]'),
    (Op.NIN, (1, -2), "title not in [1, -2]"),
    (Op.NIN, (0.5,), "title not in [0.5]"),
    (Op.NIN, (False,), "title not in [false]"),
])
def test_every_operator_and_value_type_on_a_field(op, value, expected):
    # Text fields take strings, time fields integers; other scalars are refused on them (see below)
    # and compared as JSON on metadata keys.
    first = value[0] if isinstance(value, tuple) else value
    if isinstance(first, str):
        assert compile_filter(Condition("title", op, value)) == expected
    elif isinstance(first, int) and not isinstance(first, bool):
        assert compile_filter(Condition("created_at", op, value)) == expected.replace("title", "created_at")
    else:
        with pytest.raises(InvalidFilter, match="^filter field 'title' cannot be compared with "):
            compile_filter(Condition("title", op, value))


@pytest.mark.parametrize(("op", "value", "expected"), [
    (Op.EQ, "a", 'metadata["k"] == "a"'),
    (Op.EQ, 3, 'metadata["k"] == 3'),
    (Op.EQ, 0.5, 'metadata["k"] == 0.5'),
    (Op.EQ, False, 'metadata["k"] == false'),
    (Op.NE, True, 'metadata["k"] != true'),
    (Op.NE, "a", 'metadata["k"] != "a"'),
    (Op.GT, 3, 'metadata["k"] > 3'),
    (Op.GTE, 3, 'metadata["k"] >= 3'),
    (Op.LT, 0.5, 'metadata["k"] < 0.5'),
    (Op.LTE, "m", 'metadata["k"] <= "m"'),
    # milvus-lite has no `in` on JSON paths: lists become an OR of equalities.
    (Op.IN, ("a", "b"), '(metadata["k"] == "a" or metadata["k"] == "b")'),
    (Op.IN, (1,), '(metadata["k"] == 1)'),
    (Op.IN, (True, 0.5), '(metadata["k"] == true or metadata["k"] == 0.5)'),
    (Op.NIN, ("a", "b"), 'not (metadata["k"] == "a" or metadata["k"] == "b")'),
    (Op.NIN, (2,), 'not (metadata["k"] == 2)'),
])
def test_every_operator_and_value_type_on_metadata(op, value, expected):
    assert compile_filter(Condition("metadata.k", op, value), {"k"}) == expected


def test_operators_are_a_closed_set_with_their_comparators():
    assert [o.value for o in Op] == ["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "prefix",
                                     "exists", "is_null", "contains_any", "contains_all"]


def test_boolean_structure_is_parenthesised_exactly():
    node = And((Condition("source_id", Op.EQ, "a"),
                Or((Condition("metadata.year", Op.GTE, 2020), Not(Condition("title", Op.IN, ("x", "y")))))))
    assert compile_filter(node, {"year"}) == (
        '(source_id == "a") and ((metadata["year"] >= 2020) or (not (title in ["x", "y"])))')
    assert compile_filter(Or((Condition("created_at", Op.EQ, 1),))) == "(created_at == 1)"
    assert compile_filter(And((Condition("created_at", Op.EQ, 1), Condition("created_at", Op.EQ, 2)))) == (
        "(created_at == 1) and (created_at == 2)")
    assert compile_filter(Or((Condition("created_at", Op.EQ, 1), Condition("created_at", Op.EQ, 2)))) == (
        "(created_at == 1) or (created_at == 2)")


def test_not_around_metadata_conditions():
    assert compile_filter(Not(Condition("metadata.k", Op.EQ, 1)), {"k"}) == 'not (metadata["k"] == 1)'
    assert compile_filter(Not(Condition("metadata.k", Op.IN, (1, 2))), {"k"}) == (
        'not ((metadata["k"] == 1 or metadata["k"] == 2))')
    assert compile_filter(Not(Not(Condition("metadata.k", Op.NIN, (1,)))), {"k"}) == (
        'not (not (not (metadata["k"] == 1)))')


# -- fields --------------------------------------------------------------------------------------

def test_filterable_fields_are_exactly_the_chunk_fields_without_the_boundary():
    assert sorted(FILTERABLE_FIELDS) == ALL_FIELDS


@pytest.mark.parametrize("field", ALL_FIELDS)
def test_each_filterable_field_compiles_as_itself(field):
    if field in ("created_at", "updated_at"):
        assert compile_filter(Condition(field, Op.EQ, 1)) == f"{field} == 1"
    else:
        assert compile_filter(Condition(field, Op.EQ, "v")) == f'{field} == "v"'


@pytest.mark.parametrize("field", ["tenant", "namespace", "id", "text", "dense", "sparse", "parent_key",
                                   "metadata", "TITLE", " title"])
def test_boundary_and_other_columns_are_never_filterable(field):
    with pytest.raises(InvalidFilter, match=rf"^filter field '{field}' is not filterable here; allowed: "
                                            r"chunk_id, content_hash, created_at, source_id, source_path, "
                                            r"source_url, title, updated_at$"):
        compile_filter(Condition(field, Op.EQ, "x"))


def test_boundary_fields_stay_closed_even_when_declared_as_metadata_keys():
    # `metadata.tenant` is a key inside the JSON column, never the row's tenant.
    assert compile_filter(Condition("metadata.tenant", Op.EQ, "x"), {"tenant"}) == 'metadata["tenant"] == "x"'
    with pytest.raises(InvalidFilter, match="'tenant' is not filterable"):
        compile_filter(Condition("tenant", Op.EQ, "x"), {"tenant"})


def test_unknown_field_message_lists_metadata_keys_sorted():
    with pytest.raises(InvalidFilter, match=r"^filter field 'metadata.secret' is not filterable here; allowed: "
                                            r"chunk_id, content_hash, created_at, metadata.a, metadata.year, "
                                            r"source_id, source_path, source_url, title, updated_at$"):
        compile_filter(Condition("metadata.secret", Op.EQ, 1), {"year", "a"})


@pytest.mark.parametrize("key", ["k", "_", "K9_x", "a" * 64])
def test_declared_metadata_keys_matching_the_pattern_are_filterable(key):
    assert compile_filter(Condition(f"metadata.{key}", Op.EQ, 1), {key}) == f'metadata["{key}"] == 1'


@pytest.mark.parametrize("key", ["ab-c", "a b", "9a", "", "a" * 65, "ab\n", '"]', "é"])
def test_declared_metadata_keys_outside_the_pattern_are_refused(key):
    # The whole key must match: a prefix match would let `ab-c` or a trailing newline through.
    with pytest.raises(InvalidFilter, match=r"is not filterable here"):
        compile_filter(Condition(f"metadata.{key}", Op.EQ, 1), {key})


def test_metadata_prefix_is_exact():
    with pytest.raises(InvalidFilter, match="not filterable"):
        compile_filter(Condition("metadataX.k", Op.EQ, 1), {"k"})
    with pytest.raises(InvalidFilter, match="not filterable"):
        compile_filter(Condition("metadata.", Op.EQ, 1), {""})


# -- values --------------------------------------------------------------------------------------

@pytest.mark.parametrize("hostile", [
    '" or tenant == "x',
    "' or tenant == 'x",
    'a\\" or 1 == 1 or \\"',
    "back\\slash\\",
    'quote"inside',
    "ünïcödé — 東京",
    "new\nline\ttab\rreturn",
])
def test_hostile_strings_stay_one_literal(hostile):
    expr = compile_filter(Condition("source_id", Op.EQ, hostile))
    assert expr.startswith('source_id == "') and expr.endswith('"')
    assert json.loads(expr[len("source_id == "):]) == hostile


def test_literals_render_exactly():
    assert literal("東京") == '"東京"'
    assert literal('a"b\\') == '"a\\"b\\\\"'
    assert literal("\t\n\r") == '"\\t\\n\\r"'
    assert literal(True) == "true"
    assert literal(False) == "false"
    assert literal(0) == "0"
    assert literal(-12) == "-12"
    assert literal(0.1) == "0.1"
    assert literal(1e20) == "1e+20"
    assert literal(-2.5) == "-2.5"


UNSAFE = [chr(c) for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]]
SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff"]


@pytest.mark.parametrize("char", UNSAFE + SURROGATES, ids=lambda c: f"U+{ord(c):04X}")
def test_control_characters_and_lone_surrogates_are_refused(char):
    with pytest.raises(InvalidFilter, match=r"contains a control character or lone surrogate; "
                                            r"allowed: printable text, tab, newline$") as raised:
        literal(f"a{char}b")
    assert repr(f"a{char}b") in raised.value.message


@pytest.mark.parametrize("char", ["\t", "\n", "\r", " ", "~", "\x80", "\ud7ff", "\ue000", "\U0001F600"],
                         ids=lambda c: f"U+{ord(c):04X}")
def test_characters_next_to_the_unsafe_ranges_are_accepted(char):
    assert json.loads(literal(f"a{char}b")) == f"a{char}b"


def test_non_finite_numbers_are_refused():
    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(InvalidFilter, match=rf"^filter value {value!r} is not a finite number; "
                                                r"allowed: finite numbers$"):
            literal(value)


def test_integers_are_int64():
    assert literal(INT64_MAX) == "9223372036854775807"
    assert literal(INT64_MIN) == "-9223372036854775808"
    for value in (INT64_MAX + 1, INT64_MIN - 1, 10**30):
        with pytest.raises(InvalidFilter, match=rf"^filter value {value} is out of range; allowed: integers "
                                                r"from -9223372036854775808 to 9223372036854775807$"):
            literal(value)
    with pytest.raises(InvalidFilter, match="out of range"):
        compile_filter(Condition("metadata.n", Op.IN, (1, 2**64)), {"n"})


@pytest.mark.parametrize(("value", "name"), [(None, "NoneType"), ({"a": 1}, "dict"), (b"x", "bytes"),
                                             (("a",), "tuple")])
def test_literal_refuses_other_types(value, name):
    message = rf"^filter value {re.escape(repr(value))} has type {name}; "
    with pytest.raises(InvalidFilter, match=message + r"allowed: string, integer, float, boolean, or a list of those$"):
        literal(value)


def test_long_values_are_cut_in_messages():
    long = "x" * 10_000 + "\x00"
    with pytest.raises(InvalidFilter) as raised:
        literal(long)
    assert "'xxxxx" in raised.value.message and len(raised.value.message) < 200
    assert shown("a" * 58) == "'" + "a" * 58 + "'"
    assert shown("a" * 59).startswith("'aaa") and "..." in shown("a" * 59) and len(shown("a" * 59)) <= 60
    assert shown({i: i for i in range(100)}).endswith(", ...}")
    assert len(shown([str(i) * 50 for i in range(5)])) == 63


def test_deeply_nested_values_are_shown_without_recursing():
    deep: list = [1]
    for _ in range(100_000):
        deep = [deep]
    assert shown(deep) == "[[[[...]]]]"
    with pytest.raises(InvalidFilter, match=r"^filter value for 'title' is a list holding list \[\[\[\[...\]\]\]\]; "):
        filter_value("title", [deep])


# -- operator and value shapes --------------------------------------------------------------------

def test_unknown_operator_names_allowed_set():
    with pytest.raises(InvalidFilter, match=r"^filter operator 'like' is unknown; "
                                            r"allowed: contains, contains_all, contains_any, eq, exists, gt, gte, "
                                            r"in, is_null, lt, lte, ne, nin, prefix$"):
        compile_filter(Condition("title", "like", "x%"))  # type: ignore[arg-type]


def test_string_operators_are_accepted():
    assert compile_filter(Condition("created_at", "gte", 1)) == "created_at >= 1"  # type: ignore[arg-type]


@pytest.mark.parametrize("op", [Op.IN, Op.NIN])
def test_list_operators_need_a_non_empty_list(op):
    with pytest.raises(InvalidFilter, match=rf"^operator '{op}' on 'title' needs a list of values, got 'x'$"):
        compile_filter(Condition("title", op, "x"))
    with pytest.raises(InvalidFilter, match=rf"^operator '{op}' on 'title' needs at least one value, got \[\]$"):
        compile_filter(Condition("title", op, ()))
    assert compile_filter(Condition("title", op, ["a"])).endswith('["a"]')


@pytest.mark.parametrize("op", [Op.EQ, Op.NE, Op.GT, Op.GTE, Op.LT, Op.LTE])
def test_scalar_operators_refuse_lists(op):
    with pytest.raises(InvalidFilter, match=rf"^operator '{op}' on 'title' takes one value, got a list; "
                                            r"use 'in', 'nin', 'contains_any' or 'contains_all'$"):
        compile_filter(Condition("title", op, ("x",)))
    with pytest.raises(InvalidFilter, match="takes one value"):
        compile_filter(Condition("title", op, ["x"]))


@pytest.mark.parametrize("op", [Op.GT, Op.GTE, Op.LT, Op.LTE])
def test_booleans_only_compare_for_equality(op):
    with pytest.raises(InvalidFilter, match=rf"^operator '{op}' on 'metadata.ok' cannot compare booleans; "
                                            r"allowed: eq, ne$"):
        compile_filter(Condition("metadata.ok", op, True), {"ok"})
    with pytest.raises(InvalidFilter, match="cannot compare booleans"):
        compile_filter(Condition("metadata.ok", op, False), {"ok"})


@pytest.mark.parametrize("kind", [And, Or])
def test_empty_and_or_are_refused(kind):
    with pytest.raises(InvalidFilter, match=rf"^'{kind.__name__.lower()}' needs at least one condition$"):
        compile_filter(kind(()))


def test_unknown_node_types_are_refused():
    with pytest.raises(InvalidFilter, match=r"^unknown filter node 'title == 1'; allowed: Condition, And, Or, Not$"):
        compile_filter("title == 1")  # type: ignore[arg-type]


# -- size caps: exactly at the limit passes, one over is refused -------------------------------------

def test_caps_are_the_documented_numbers():
    assert (MAX_NODES, MAX_DEPTH, MAX_VALUES) == (64, 8, 1024)


def test_node_cap():
    at = And(tuple(Condition("title", Op.EQ, str(i)) for i in range(MAX_NODES - 1)))
    assert compile_filter(at).count("title ==") == MAX_NODES - 1
    over = And(tuple(Condition("title", Op.EQ, str(i)) for i in range(MAX_NODES)))
    with pytest.raises(InvalidFilter, match=r"^filter has more than 64 nodes; allowed: at most 64 conditions and "
                                            r"and/or/not nodes in all$"):
        compile_filter(over)


def test_nots_count_as_nodes():
    nots = And(tuple(Not(Condition("created_at", Op.EQ, i)) for i in range(32)))
    with pytest.raises(InvalidFilter, match="more than 64 nodes"):
        compile_filter(nots)
    assert compile_filter(And(tuple(Not(Condition("created_at", Op.EQ, i)) for i in range(31))))


@pytest.mark.parametrize("kind", [And, Or, Not])
def test_depth_cap(kind):
    assert compile_filter(nested(MAX_DEPTH, kind)).count("title") == 1
    with pytest.raises(InvalidFilter, match=r"^filter is nested more than 8 levels deep; allowed: at most 8 levels "
                                            r"\(a condition alone is one\)$"):
        compile_filter(nested(MAX_DEPTH + 1, kind))


def test_depth_is_the_deepest_branch():
    shallow = Condition("created_at", Op.EQ, 1)
    assert compile_filter(And((shallow, nested(MAX_DEPTH - 1))))
    with pytest.raises(InvalidFilter, match="more than 8 levels"):
        compile_filter(And((shallow, nested(MAX_DEPTH))))
    with pytest.raises(InvalidFilter, match="more than 8 levels"):
        compile_filter(And((nested(MAX_DEPTH), shallow)))


def test_value_cap_counts_every_value_of_the_whole_filter():
    half = tuple(range(MAX_VALUES // 2))
    at = And((Condition("created_at", Op.IN, half), Condition("created_at", Op.NIN, half)))
    assert compile_filter(at).count(",") == MAX_VALUES - 2
    message = (r"^filter has more than 1024 values; allowed: at most 1024 in all, each value of an in/nin list "
               r"counted$")
    with pytest.raises(InvalidFilter, match=message):
        compile_filter(And((Condition("created_at", Op.IN, half), Condition("created_at", Op.NIN, half),
                            Condition("created_at", Op.EQ, 1))))
    assert compile_filter(And((Condition("created_at", Op.IN, half[:-1]), Condition("created_at", Op.NIN, half),
                               Condition("created_at", Op.EQ, 1))))
    with pytest.raises(InvalidFilter, match=message):
        compile_filter(Condition("created_at", Op.IN, tuple(range(MAX_VALUES + 1))))
    assert compile_filter(Condition("created_at", Op.IN, tuple(range(MAX_VALUES))))


def test_nots_and_combinators_hold_no_values():
    full = Condition("created_at", Op.IN, tuple(range(MAX_VALUES)))
    assert compile_filter(Not(full)).startswith("not (created_at in [0, 1, ")
    assert compile_filter(And((Not(full),)))
    assert filter_from_json({"not": {"field": "created_at", "op": "in", "value": list(range(MAX_VALUES))}})


def test_many_large_metadata_lists_are_refused_regression():
    # Issue 9: 63 x `metadata IN [1024 values]` was legal and took 18 s; now the total is capped.
    node = And(tuple(Condition("metadata.k", Op.IN, tuple(range(1024))) for _ in range(63)))
    with pytest.raises(InvalidFilter, match="more than 1024 values"):
        compile_filter(node, {"k"})


def test_check_size_stops_walking_at_the_first_cap():
    visited = []

    def parts(depth):
        visited.append(depth)
        return [depth + 1], 0

    with pytest.raises(InvalidFilter, match="more than 8 levels"):
        check_size(1, parts)
    assert visited == list(range(1, MAX_DEPTH + 1))


# -- filters from JSON (query planners) -----------------------------------------------------------

def test_json_and_or_not_and_conditions():
    a, b = {"field": "title", "op": "eq", "value": "a"}, {"field": "metadata.n", "op": "in", "value": [1, 2]}
    assert filter_from_json({"and": [a, b]}) == And((Condition("title", Op.EQ, "a"),
                                                     Condition("metadata.n", Op.IN, (1, 2))))
    assert filter_from_json({"or": [a, b]}) == Or((Condition("title", Op.EQ, "a"),
                                                   Condition("metadata.n", Op.IN, (1, 2))))
    assert filter_from_json({"not": a}) == Not(Condition("title", Op.EQ, "a"))
    assert compile_filter(filter_from_json({"or": [a, {"not": b}]}), {"n"}) == (
        '(title == "a") or (not ((metadata["n"] == 1 or metadata["n"] == 2)))')
    assert filter_from_json({"field": "title", "op": "nin", "value": ["x"]}) == Condition("title", Op.NIN, ("x",))


@pytest.mark.parametrize(("data", "got"), [
    ({"and": [], "or": []}, "and, or"),
    ({"not": {}, "field": "title"}, "not, condition"),
    ({"and": [], "op": "eq"}, "and, condition"),
    ({}, "nothing"),
    ({"value": 1}, "nothing"),
])
def test_json_node_must_have_exactly_one_shape(data, got):
    with pytest.raises(InvalidFilter, match=rf"^a filter node must be exactly one of: condition \(field, op, value\), "
                                            rf"and, or, not; got {got}$"):
        filter_from_json(data)


@pytest.mark.parametrize(("data", "message"), [
    ([], r"^a filter must be a JSON object, got list \[\]$"),
    ("title == 1", r"^a filter must be a JSON object, got str 'title == 1'$"),
    (None, r"^a filter must be a JSON object, got null None$"),
    ({"and": {"field": "title"}}, r"^'and' takes a list of filters, got object \{'field': 'title'\}$"),
    ({"or": "x"}, r"^'or' takes a list of filters, got str 'x'$"),
    ({"and": [1]}, r"^a filter must be a JSON object, got int 1$"),
    ({"not": [{"field": "title", "op": "eq", "value": 1}]}, r"^a filter must be a JSON object, got list"),
    ({"op": "eq", "value": 1}, r"^a filter condition needs a string 'field', got null None$"),
    ({"field": 3, "op": "eq", "value": 1}, r"^a filter condition needs a string 'field', got int 3$"),
    ({"field": "title", "op": "like", "value": 1}, r"^filter operator 'like' is unknown; allowed: contains, "
                                                   r"contains_all, contains_any, eq, exists, gt, gte, in, is_null, "
                                                   r"lt, lte, ne, nin, prefix$"),
    ({"field": "title", "value": 1}, r"^filter operator None is unknown; allowed: contains, "),
])
def test_json_shape_errors_name_the_value(data, message):
    with pytest.raises(InvalidFilter, match=message):
        filter_from_json(data)


@pytest.mark.parametrize("key", ["and", "or", "not"])
def test_json_depth_is_checked_before_recursing_regression(key):
    # Was a RecursionError (INTERNAL): 1,000 levels are refused after MAX_DEPTH steps.
    with pytest.raises(InvalidFilter, match="more than 8 levels deep"):
        filter_from_json(nested_json(1000, key))
    with pytest.raises(InvalidFilter, match="more than 8 levels deep"):
        filter_from_json(nested_json(MAX_DEPTH + 1, key))
    assert filter_from_json(nested_json(MAX_DEPTH, key))


def test_json_width_and_values_are_capped():
    wide = {"or": [{"field": "title", "op": "eq", "value": i} for i in range(100_000)]}
    with pytest.raises(InvalidFilter, match="more than 64 nodes"):
        filter_from_json(wide)
    many = {"and": [{"field": "title", "op": "in", "value": list(range(600))}] * 2}
    with pytest.raises(InvalidFilter, match="more than 1024 values"):
        filter_from_json(many)
    at = {"and": [{"field": "title", "op": "in", "value": list(range(512))}] * 2}
    assert filter_from_json(at)
    scalars = {"and": [{"field": "title", "op": "in", "value": list(range(1023))},
                       {"field": "title", "op": "eq", "value": 1}, {"field": "title", "op": "eq", "value": 1}]}
    with pytest.raises(InvalidFilter, match="more than 1024 values"):
        filter_from_json(scalars)
    scalars["and"].pop()
    assert filter_from_json(scalars)


def test_json_shape_errors_win_over_size_for_what_is_not_a_filter():
    # Malformed parts are not measured as nodes or values; the shape error names them.
    full = {"field": "title", "op": "in", "value": list(range(MAX_VALUES))}
    with pytest.raises(InvalidFilter, match=r"^a filter must be a JSON object, got int 7$"):
        filter_from_json({"and": [full, 7]})
    with pytest.raises(InvalidFilter, match=r"^'or' takes a list of filters, got str 'xxxx"):
        filter_from_json({"or": "x" * 100})
    with pytest.raises(InvalidFilter, match=r"^'and' takes a list of filters, got object"):
        filter_from_json({"and": {str(i): i for i in range(100)}})


@pytest.mark.parametrize(("value", "message"), [
    ({"a": 1}, r"^filter value for 'title' is object \{'a': 1\}; "),
    (None, r"^filter value for 'title' is null None; "),
    ([1, [2]], r"^filter value for 'title' is a list holding list \[2\]; "),
    (["a", None], r"^filter value for 'title' is a list holding null None; "),
    ([{"b": 2}], r"^filter value for 'title' is a list holding object \{'b': 2\}; "),
])
def test_wrong_value_types_are_invalid_filters_naming_the_value(value, message):
    with pytest.raises(InvalidFilter, match=message + r"allowed: a string, number or boolean, or a list of those$") \
            as raised:
        filter_value("title", value)
    assert raised.value.code is ErrorCode.INVALID_FILTER
    with pytest.raises(InvalidFilter, match=message):
        filter_from_json({"field": "title", "op": "in", "value": value})


def test_scalar_and_list_values_pass_through():
    assert filter_value("f", "a") == "a"
    assert filter_value("f", 1) == 1
    assert filter_value("f", 0.5) == 0.5
    assert filter_value("f", False) is False
    assert filter_value("f", ["a", 1, 0.5, True]) == ("a", 1, 0.5, True)
    assert filter_value("f", []) == ()


# -- the tenant boundary ------------------------------------------------------------------------

def test_boundary_wraps_user_expression():
    expr = scoped_expression("acme", "docs", 'title == "x" or source_id == "y"')
    assert expr == 'tenant == "acme" and namespace == "docs" and (title == "x" or source_id == "y")'


def test_boundary_without_a_user_expression():
    assert scoped_expression("acme", "docs", None) == 'tenant == "acme" and namespace == "docs"'
    assert scoped_expression("acme", "docs", "") == 'tenant == "acme" and namespace == "docs"'


def test_boundary_over_several_namespaces():
    assert scoped_expression("acme", ["a", "b"], None) == 'tenant == "acme" and namespace in ["a", "b"]'
    assert scoped_expression("acme", ("a",), "x == 1") == 'tenant == "acme" and namespace in ["a"] and (x == 1)'
    assert scoped_expression("acme", [], None) == 'tenant == "acme" and namespace in []'


def test_boundary_values_are_literals():
    assert scoped_expression('a" or "1', 'n"', None) == 'tenant == "a\\" or \\"1" and namespace == "n\\""'
    with pytest.raises(InvalidFilter, match="control character"):
        scoped_expression("acme", "docs\x00", None)


def test_storage_adapter_boundary_delegates_to_scoped_expression():
    scope = Scope(tenant="acme", namespace="docs", collection="c")
    assert MilvusStore._boundary(scope, None) == scoped_expression("acme", "docs", None)
    assert MilvusStore._boundary(scope, "title == 1") == 'tenant == "acme" and namespace == "docs" and (title == 1)'


def test_text_and_time_fields_partition_the_top_level_fields():
    from gateway.storage.filters import TEXT_FIELDS, TIME_FIELDS

    assert TEXT_FIELDS | TIME_FIELDS == FILTERABLE_FIELDS and not TEXT_FIELDS & TIME_FIELDS
    assert TIME_FIELDS == {"created_at", "updated_at"}


@pytest.mark.parametrize("field", ["source_id", "chunk_id", "title", "source_url", "source_path", "content_hash"])
@pytest.mark.parametrize("value, shown_as", [(0, "0"), (True, "True"), (1.5, "1.5"), (("a", 2), "2")])
def test_text_fields_take_strings_only(field, value, shown_as):
    op = Op.IN if isinstance(value, tuple) else Op.EQ
    with pytest.raises(InvalidFilter, match=re.escape(f"filter field {field!r} cannot be compared with {shown_as}; "
                                                      "allowed: a string")):
        compile_filter(Condition(field, op, value))


@pytest.mark.parametrize("field", ["created_at", "updated_at"])
@pytest.mark.parametrize("value, shown_as", [("yesterday", "'yesterday'"), (True, "True"), (1.5, "1.5"),
                                             ((1, "2"), "'2'")])
def test_time_fields_take_integers_only(field, value, shown_as):
    op = Op.NIN if isinstance(value, tuple) else Op.GT
    with pytest.raises(InvalidFilter, match=re.escape(f"filter field {field!r} cannot be compared with {shown_as}; "
                                                      "allowed: an integer (epoch milliseconds)")):
        compile_filter(Condition(field, op, value))


def test_metadata_compares_any_scalar():
    assert compile_filter(Condition("metadata.year", Op.EQ, "2026"), {"year"}) == 'metadata["year"] == "2026"'
    assert compile_filter(Condition("metadata.year", Op.EQ, 2026), {"year"}) == 'metadata["year"] == 2026'


# -- text, presence and array operators -----------------------------------------------------------

@pytest.mark.parametrize(("op", "value", "expected"), [
    (Op.CONTAINS, "refund", 'title like "%refund%"'),
    (Op.PREFIX, "refund", 'title like "refund%"'),
    (Op.CONTAINS, "東京", 'title like "%東京%"'),
    # A client's wildcard is that character: `\%` and `\_` in the pattern, each backslash doubled
    # once more as the string literal is written.
    (Op.CONTAINS, "100%", 'title like "%100\\\\%%"'),
    (Op.PREFIX, "a_b", 'title like "a\\\\_b%"'),
    (Op.PREFIX, "%_%", 'title like "\\\\%\\\\_\\\\%%"'),
    (Op.CONTAINS, "back\\slash", 'title like "%back\\\\\\\\slash%"'),
    (Op.PREFIX, 'say "hi"', 'title like "say \\"hi\\"%"'),
])
def test_text_operators_are_like_patterns_with_the_clients_text_escaped(op, value, expected):
    assert compile_filter(Condition("title", op, value)) == expected
    assert compile_filter(Condition("metadata.k", op, value), {"k"}) == expected.replace("title", 'metadata["k"]')


def test_like_patterns_keep_letters_and_digits_as_they_are():
    assert compile_filter(Condition("source_path", Op.PREFIX, "docs/A-9.md")) == 'source_path like "docs/A-9.md%"'


@pytest.mark.parametrize("value", ["", 3, True, 0.5])
def test_text_operators_need_some_text(value):
    with pytest.raises(InvalidFilter, match=rf"^operator 'contains' on 'metadata.k' needs text of at least one "
                                            rf"character, got {re.escape(repr(value))}$"):
        compile_filter(Condition("metadata.k", Op.CONTAINS, value), {"k"})
    with pytest.raises(InvalidFilter, match=r"^operator 'prefix' on 'metadata.k' needs text"):
        compile_filter(Condition("metadata.k", Op.PREFIX, value), {"k"})


def test_text_operators_take_one_value():
    with pytest.raises(InvalidFilter, match=r"^operator 'prefix' on 'title' takes one value, got a list; "):
        compile_filter(Condition("title", Op.PREFIX, ("a",)))


def test_control_characters_are_refused_in_patterns():
    with pytest.raises(InvalidFilter, match="control character"):
        compile_filter(Condition("title", Op.CONTAINS, "a\x00"))


@pytest.mark.parametrize(("op", "value", "expected"), [
    (Op.EXISTS, True, 'metadata["k"] is not null'),
    (Op.EXISTS, False, 'metadata["k"] is null'),
    (Op.IS_NULL, True, 'metadata["k"] is null'),
    (Op.IS_NULL, False, 'metadata["k"] is not null'),
])
def test_presence_operators(op, value, expected):
    assert compile_filter(Condition("metadata.k", op, value), {"k"}) == expected
    assert compile_filter(Not(Condition("metadata.k", op, value)), {"k"}) == f"not ({expected})"


@pytest.mark.parametrize("op", [Op.EXISTS, Op.IS_NULL])
@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_presence_operators_take_a_boolean(op, value):
    with pytest.raises(InvalidFilter, match=rf"^operator '{op}' on 'metadata.k' takes true or false, "
                                            rf"got {re.escape(repr(value))}$"):
        compile_filter(Condition("metadata.k", op, value), {"k"})


@pytest.mark.parametrize(("op", "function"), [(Op.CONTAINS_ANY, "json_contains_any"),
                                              (Op.CONTAINS_ALL, "json_contains_all")])
def test_array_operators(op, function):
    assert compile_filter(Condition("metadata.tags", op, ("a", 'b"')), {"tags"}) == (
        f'{function}(metadata["tags"], ["a", "b\\""])')
    assert compile_filter(Condition("metadata.tags", op, [1, 0.5, True]), {"tags"}) == (
        f'{function}(metadata["tags"], [1, 0.5, true])')
    with pytest.raises(InvalidFilter, match=rf"^operator '{op}' on 'metadata.tags' needs a list of values, "
                                            r"got 'a'$"):
        compile_filter(Condition("metadata.tags", op, "a"), {"tags"})
    with pytest.raises(InvalidFilter, match=rf"^operator '{op}' on 'metadata.tags' needs at least one value, "
                                            r"got \[\]$"):
        compile_filter(Condition("metadata.tags", op, ()), {"tags"})
    with pytest.raises(InvalidFilter, match="out of range"):
        compile_filter(Condition("metadata.tags", op, (2**63,)), {"tags"})


def test_array_values_count_towards_the_value_cap():
    with pytest.raises(InvalidFilter, match="more than 1024 values"):
        compile_filter(Condition("metadata.t", Op.CONTAINS_ALL, tuple(range(MAX_VALUES + 1))), {"t"})


TEXT_ALLOWED = "contains, eq, gt, gte, in, lt, lte, ne, nin, prefix"
TIME_ALLOWED = "eq, gt, gte, in, lt, lte, ne, nin"


@pytest.mark.parametrize(("field", "op", "value", "kind", "allowed_ops"), [
    ("title", Op.EXISTS, True, "a text field", TEXT_ALLOWED),
    ("source_id", Op.IS_NULL, False, "a text field", TEXT_ALLOWED),
    ("content_hash", Op.CONTAINS_ANY, ("a",), "a text field", TEXT_ALLOWED),
    ("chunk_id", Op.CONTAINS_ALL, ("a",), "a text field", TEXT_ALLOWED),
    ("created_at", Op.CONTAINS, "1", "a time field", TIME_ALLOWED),
    ("updated_at", Op.PREFIX, "1", "a time field", TIME_ALLOWED),
    ("created_at", Op.EXISTS, True, "a time field", TIME_ALLOWED),
    ("updated_at", Op.CONTAINS_ANY, (1,), "a time field", TIME_ALLOWED),
])
def test_operators_a_field_type_lacks_are_refused_naming_what_it_takes(field, op, value, kind, allowed_ops):
    with pytest.raises(InvalidFilter, match=rf"^operator '{op}' does not apply to '{field}' \({kind}\); "
                                            rf"allowed on it: {allowed_ops}$"):
        compile_filter(Condition(field, op, value))


def test_every_operator_applies_to_metadata():
    values = {Op.IN: (1,), Op.NIN: (1,), Op.CONTAINS_ANY: (1,), Op.CONTAINS_ALL: (1,), Op.EXISTS: True,
              Op.IS_NULL: True, Op.CONTAINS: "x", Op.PREFIX: "x"}
    for op in Op:
        assert compile_filter(Condition("metadata.k", op, values.get(op, 1)), {"k"}).count('metadata["k"]') >= 1


def test_text_operators_apply_to_every_text_field():
    from gateway.storage.filters import TEXT_FIELDS

    for field in TEXT_FIELDS:
        assert compile_filter(Condition(field, Op.CONTAINS, "x")) == f'{field} like "%x%"'


def test_unknown_field_is_named_before_the_operator():
    with pytest.raises(InvalidFilter, match="^filter field 'nope' is not filterable here"):
        compile_filter(Condition("nope", Op.EXISTS, True))


def test_new_operators_from_json():
    assert filter_from_json({"field": "metadata.tags", "op": "contains_any", "value": ["a"]}) == (
        Condition("metadata.tags", Op.CONTAINS_ANY, ("a",)))
    assert filter_from_json({"field": "metadata.k", "op": "exists", "value": False}) == (
        Condition("metadata.k", Op.EXISTS, False))
    assert compile_filter(filter_from_json({"field": "title", "op": "prefix", "value": "Re"})) == 'title like "Re%"'


# -- dates as ISO 8601 on the time fields -----------------------------------------------------------

@pytest.mark.parametrize(("value", "epoch_ms"), [
    ("2026-03-01", 1_772_323_200_000),
    ("2026-03-01T00:00:00Z", 1_772_323_200_000),
    ("2026-03-01T00:00:00+00:00", 1_772_323_200_000),
    ("2026-03-01T02:00:00+02:00", 1_772_323_200_000),
    ("2026-03-01T00:00:00.250Z", 1_772_323_200_250),
    ("2026-03-01T00:00:00.999999Z", 1_772_323_200_999),
    ("1970-01-01T00:00:00Z", 0),
    ("1969-12-31T23:59:59.999Z", -1),
    ("1970-01-01", 0),
])
def test_time_fields_take_iso_dates_as_epoch_milliseconds(value, epoch_ms):
    assert compile_filter(Condition("created_at", Op.GTE, value)) == f"created_at >= {epoch_ms}"
    assert compile_filter(Condition("updated_at", Op.IN, (value, 7))) == f"updated_at in [{epoch_ms}, 7]"
    assert compile_filter(Condition("updated_at", Op.NIN, [value])) == f"updated_at not in [{epoch_ms}]"


@pytest.mark.parametrize("value", ["2026-03-01T00:00:00", "2026-03-01T12:00", "20260301", "2026-13-01",
                                   "yesterday", "", "2026-03-01Z"])
def test_dates_without_a_zone_or_not_iso_are_refused(value):
    message = (f"filter field 'created_at' cannot be compared with {value!r}; allowed: an integer (epoch "
               "milliseconds), an ISO 8601 date (2026-03-01, midnight UTC) or date-time with an offset "
               "(2026-03-01T12:00:00Z)")
    with pytest.raises(InvalidFilter, match=f"^{re.escape(message)}$"):
        compile_filter(Condition("created_at", Op.EQ, value))
    with pytest.raises(InvalidFilter, match=f"^{re.escape(message)}$"):
        compile_filter(Condition("created_at", Op.IN, (1, value)))


def test_dates_are_for_time_fields_only():
    # Metadata is JSON: an ISO string there is compared as text, as stored.
    assert compile_filter(Condition("metadata.day", Op.GTE, "2026-03-01"), {"day"}) == (
        'metadata["day"] >= "2026-03-01"')
    assert compile_filter(Condition("title", Op.EQ, "2026-03-01")) == 'title == "2026-03-01"'
