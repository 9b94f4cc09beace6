import pytest

from gateway.errors import InvalidFilter
from gateway.graphql.inputs import FilterInput
from gateway.storage.filters import MAX_DEPTH, And, Condition, Not, Op, Or


def condition(value: object = "x") -> FilterInput:
    return FilterInput(field="title", op=Op.EQ, value=value)


def nested(depth: int, key: str) -> FilterInput:
    node = condition()
    for _ in range(depth - 1):
        node = FilterInput(not_=node) if key == "not" else FilterInput(**{key: [node]})
    return node


def test_filter_input_converts_every_shape():
    assert condition().to_domain() == Condition("title", Op.EQ, "x")
    assert FilterInput(and_=[condition(1), condition(2)]).to_domain() == And(
        (Condition("title", Op.EQ, 1), Condition("title", Op.EQ, 2)))
    assert FilterInput(or_=[condition(1)]).to_domain() == Or((Condition("title", Op.EQ, 1),))
    assert FilterInput(not_=FilterInput(field="metadata.k", op=Op.IN, value=[1, "a"])).to_domain() == Not(
        Condition("metadata.k", Op.IN, (1, "a")))


def test_filter_input_needs_exactly_one_shape():
    with pytest.raises(InvalidFilter, match=r"exactly one of: .*; got nothing$"):
        FilterInput().to_domain()
    with pytest.raises(InvalidFilter, match=r"; got condition, and$"):
        FilterInput(field="title", and_=[condition()]).to_domain()
    with pytest.raises(InvalidFilter, match=r"^a filter condition needs field, op and value$"):
        FilterInput(field="title").to_domain()


@pytest.mark.parametrize("key", ["and_", "or_", "not"])
def test_filter_input_depth_is_checked_before_recursing_regression(key):
    # Was a RecursionError (INTERNAL) at 1,000 levels; now INVALID_FILTER after MAX_DEPTH steps.
    with pytest.raises(InvalidFilter, match="more than 8 levels deep"):
        nested(1000, key).to_domain()
    with pytest.raises(InvalidFilter, match="more than 8 levels deep"):
        nested(MAX_DEPTH + 1, key).to_domain()
    assert nested(MAX_DEPTH, key).to_domain()


def test_filter_input_total_values_are_capped_regression():
    two_lists = FilterInput(and_=[FilterInput(field="metadata.k", op=Op.IN, value=list(range(600)))] * 2)
    with pytest.raises(InvalidFilter, match="more than 1024 values"):
        two_lists.to_domain()
    wide = FilterInput(or_=[condition(i) for i in range(65)])
    with pytest.raises(InvalidFilter, match="more than 64 nodes"):
        wide.to_domain()


@pytest.mark.parametrize(("value", "shown"), [({"a": 1}, r"object \{'a': 1\}"), ([[1]], r"a list holding list \[1\]"),
                                              ([None], "a list holding null None")])
def test_filter_input_wrong_value_types_are_invalid_filters(value, shown):
    with pytest.raises(InvalidFilter, match=rf"^filter value for 'title' is {shown}; allowed: a string, number or "
                                            r"boolean, or a list of those$"):
        FilterInput(field="title", op=Op.IN, value=value).to_domain()
