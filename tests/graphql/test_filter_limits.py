"""Filters a client can send but must not get through: over a cap, or holding values of the wrong kind.

Issue 9 (items 4 and 6): each was legal, INTERNAL or a recursion before; each is INVALID_FILTER now.
"""

import pytest

SEARCH = """
query($filter: FilterInput) {
  search(input: {query: "refund", collection: "tickets", filter: $filter}) { hits { chunk { id } } }
}
"""


def condition(op: str = "EQ", value: object = "open") -> dict:
    return {"field": "metadata.status", "op": op, "value": value}


def nested(depth: int) -> dict:
    node = condition()
    for _ in range(depth - 1):
        node = {"and": [node]}
    return node


@pytest.mark.parametrize(("filter_", "fragment"), [
    (condition("EQ", {"a": 1}), "filter value for 'metadata.status' is object {'a': 1}; allowed: a string, number"),
    (condition("IN", ["open", ["closed"]]), "is a list holding list ['closed']; allowed:"),
    (condition("IN", ["open", None]), "is a list holding null None; allowed:"),
    (nested(9), "filter is nested more than 8 levels deep; allowed: at most 8 levels"),
    ({"or": [condition("IN", list(range(600))), condition("NIN", list(range(600)))]},
     "filter has more than 1024 values; allowed: at most 1024 in all"),
])
def test_filters_over_a_cap_or_of_the_wrong_kind_are_invalid_filter(gateway, filter_, fragment):
    error = gateway.error(SEARCH, {"filter": filter_})
    assert error["extensions"]["code"] == "INVALID_FILTER"
    assert fragment in error["message"]


def test_filters_at_the_caps_still_run(gateway):
    assert gateway.data(SEARCH, {"filter": nested(8)})["search"]["hits"] is not None
    wide = {"or": [condition("IN", [f"s{i}" for i in range(512)]), condition("NIN", list(range(512)))]}
    assert gateway.data(SEARCH, {"filter": wide})["search"]["hits"] is not None


def test_integers_beyond_int64_are_refused_as_variables_and_as_literals(gateway):
    # In variables, the request check refuses them before any filter is built (INVALID_INPUT).
    error = gateway.error(SEARCH, {"filter": condition("EQ", 2**70)})
    assert error["extensions"]["code"] == "INVALID_INPUT" and "outside 64-bit range" in error["message"]
    # Written into the document, they reach the filter, which refuses them (INVALID_FILTER).
    literal = SEARCH.replace("query($filter: FilterInput)", "query").replace(
        "filter: $filter", 'filter: {field: "metadata.status", op: EQ, value: 1180591620717411303424}')
    error = gateway.error(literal)
    assert error["extensions"]["code"] == "INVALID_FILTER"
    assert "filter value 1180591620717411303424 is out of range; allowed: integers from" in error["message"]
