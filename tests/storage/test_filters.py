import pytest

from gateway.errors import InvalidFilter
from gateway.storage.filters import And, Condition, Not, Op, Or, compile_filter, literal, scoped_expression


def test_compiles_conditions_and_boolean_structure():
    node = And((Condition("source_id", Op.EQ, "a"),
                Or((Condition("metadata.year", Op.GTE, 2020), Not(Condition("title", Op.IN, ("x", "y")))))))
    assert compile_filter(node, {"year"}) == (
        '(source_id == "a") and ((metadata["year"] >= 2020) or (not (title in ["x", "y"])))')


def test_not_in_and_booleans_and_floats():
    assert compile_filter(Condition("chunk_id", Op.NIN, ("0", "1"))) == 'chunk_id not in ["0", "1"]'
    assert compile_filter(Condition("metadata.ok", Op.EQ, True), {"ok"}) == 'metadata["ok"] == true'
    assert compile_filter(Condition("metadata.score", Op.LT, 0.5), {"score"}) == 'metadata["score"] < 0.5'


@pytest.mark.parametrize("hostile", [
    '" or tenant == "x',
    "' or tenant == 'x",
    'a\\" or 1 == 1 or \\"',
    "back\\slash\\",
    'quote"inside',
    "ünïcödé — 東京",
    "new\nline\ttab",
])
def test_hostile_strings_stay_one_literal(hostile):
    expr = compile_filter(Condition("source_id", Op.EQ, hostile))
    # The value is a single JSON string literal; nothing escapes into the expression.
    assert expr.startswith('source_id == "') and expr.endswith('"')
    body = expr[len('source_id == '):]
    import json
    assert json.loads(body) == hostile


def test_non_ascii_is_kept_verbatim():
    assert literal("東京") == '"東京"'


@pytest.mark.parametrize("value", ["bell\x07", "nul\x00", "lone\ud800"])
def test_control_characters_are_refused_with_the_value(value):
    with pytest.raises(InvalidFilter, match="control character"):
        literal(value)


def test_unknown_field_names_field_and_allowed_set():
    with pytest.raises(InvalidFilter, match=r"filter field 'tenant' is not filterable here; allowed: .*source_id"):
        compile_filter(Condition("tenant", Op.EQ, "other"))
    with pytest.raises(InvalidFilter, match=r"'metadata.secret'.*metadata.year"):
        compile_filter(Condition("metadata.secret", Op.EQ, 1), {"year"})


def test_unknown_operator_names_allowed_set():
    with pytest.raises(InvalidFilter, match=r"operator 'like' is unknown; allowed: eq, gt, gte, in, lt, lte, ne, nin"):
        compile_filter(Condition("title", "like", "x%"))  # type: ignore[arg-type]


def test_operator_value_shapes_are_checked():
    with pytest.raises(InvalidFilter, match="needs a list"):
        compile_filter(Condition("title", Op.IN, "x"))
    with pytest.raises(InvalidFilter, match="takes one value"):
        compile_filter(Condition("title", Op.EQ, ("x",)))
    with pytest.raises(InvalidFilter, match="not a finite number"):
        compile_filter(Condition("created_at", Op.GT, float("nan")))
    with pytest.raises(InvalidFilter, match="at least one condition"):
        compile_filter(And(()))


def test_filter_size_is_bounded():
    huge = And(tuple(Condition("title", Op.EQ, str(i)) for i in range(100)))
    with pytest.raises(InvalidFilter, match="more than 64 nodes"):
        compile_filter(huge)


def test_boundary_wraps_user_expression():
    expr = scoped_expression("acme", "docs", 'title == "x" or source_id == "y"')
    assert expr == 'tenant == "acme" and namespace == "docs" and (title == "x" or source_id == "y")'
    assert scoped_expression("acme", ["a", "b"], None) == 'tenant == "acme" and namespace in ["a", "b"]'
