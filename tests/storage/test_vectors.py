"""A client's vectors are checked once, at the boundary: numbers, finite, non-empty, the collection's size."""

import numpy as np
import pytest

from gateway.errors import DimensionMismatch, InvalidInput
from gateway.storage.vectors import MAX_DIM, check_dimension, parse_vector, vector_digest


def test_a_list_of_numbers_becomes_float32():
    vector = parse_vector([1, 0.5, -2], "query vector")
    assert vector.dtype == np.float32 and vector.tolist() == [1.0, 0.5, -2.0]


@pytest.mark.parametrize("values, reason", [
    ([], "is empty"),
    ([0.0, 0.0], "all zeros"),
    ([1.0, float("nan")], r"non-finite value \(nan\) at \[1\]"),
    ([float("inf")], r"non-finite value \(inf\) at \[0\]"),
    ([1e39], r"beyond float32's range"),
    ([1.0, True], "must be a list of numbers, got list"),
    (["1.0"], "must be a list of numbers"),
    ("1,2", "must be a list of numbers, got str"),
    ([1.0] * (MAX_DIM + 1), f"has {MAX_DIM + 1} dimensions; at most {MAX_DIM}"),
])
def test_bad_vectors_are_refused_naming_where_and_why(values, reason):
    with pytest.raises(InvalidInput, match=reason):
        parse_vector(values, "vector of documents[3].chunks[1]")


def test_a_dimension_mismatch_names_both_sizes_and_the_collection():
    with pytest.raises(DimensionMismatch, match=r"^vector of documents\[3\]\.chunks\[1\] has 768 dimensions; "
                                                r"collection support/faq stores 384$"):
        check_dimension(np.ones(768, dtype=np.float32), 384, "vector of documents[3].chunks[1]", "support/faq")
    check_dimension(np.ones(384, dtype=np.float32), 384, "query vector", "support/faq")


def test_the_digest_is_the_float32_value():
    assert vector_digest(parse_vector([0.1, 0.2], "v")) == vector_digest(np.array([0.1, 0.2], dtype=np.float32))
    assert vector_digest(parse_vector([0.1, 0.2], "v")) != vector_digest(parse_vector([0.1, 0.20001], "v"))


def test_stored_vectors_are_unit_length_float32():
    from gateway.storage.vectors import unit_length

    stored = unit_length(parse_vector([3, 4], "v"))
    assert stored.dtype == np.float32 and stored.tolist() == pytest.approx([0.6, 0.8])
