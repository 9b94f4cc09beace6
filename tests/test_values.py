"""Client JSON values: depth, 64-bit integers, finite numbers, valid Unicode; checked without recursion."""

import math

import pytest

from gateway.errors import InvalidInput, LimitExceeded
from gateway.values import INT64_MAX, INT64_MIN, check_json, has_surrogate


def test_ordinary_values_pass():
    check_json({"a": [1, 2.5, "x", True, None, {"b": INT64_MAX, "c": INT64_MIN}]}, where="v", max_depth=4)


@pytest.mark.parametrize("value, message", [
    (INT64_MAX + 1, r"v\.k is the integer 9223372036854775808, outside 64-bit range"),
    (INT64_MIN - 1, "outside 64-bit range"),
    (math.nan, r"v\.k is nan; allowed: finite numbers"),
    (math.inf, "is inf; allowed: finite numbers"),
    ("a\udc00", r"v\.k contains a lone UTF-16 surrogate"),
    (b"bytes", "has type bytes; allowed: JSON values"),
])
def test_bad_leaves_are_named(value, message):
    with pytest.raises(InvalidInput, match=message):
        check_json({"k": value}, where="v", max_depth=4)


def test_surrogate_keys_are_refused():
    with pytest.raises(InvalidInput, match="has a key that is not valid UTF-8 text"):
        check_json({"\ud800": 1}, where="v", max_depth=4)


def test_depth_is_exact_and_never_recurses():
    nested: object = 1
    for _ in range(4):
        nested = [nested]
    check_json(nested, where="v", max_depth=4)
    with pytest.raises(LimitExceeded, match="nested more than 4 levels deep; at most 4"):
        check_json([nested], where="v", max_depth=4)
    deep: object = {}
    for _ in range(100_000):  # far beyond the interpreter's recursion limit
        deep = {"a": deep}
    with pytest.raises(LimitExceeded):
        check_json(deep, where="v", max_depth=32)


def test_has_surrogate():
    assert has_surrogate("x\ud83dy") and not has_surrogate("x\U0001F600y")
