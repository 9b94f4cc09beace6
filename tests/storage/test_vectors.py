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


def _base64(values, dtype="<f4") -> str:
    import base64

    return base64.b64encode(np.asarray(values, dtype=dtype).tobytes()).decode("ascii")


def test_base64_of_little_endian_float32_is_the_same_vector_as_its_list():
    from gateway.storage.vectors import decode_vector

    values = [0.1, -2.5, 3e-7, 1e30]
    decoded = decode_vector(_base64(values), "vector of document 'a'")
    assert decoded.dtype == np.float32 and decoded.flags.writeable
    assert vector_digest(decoded) == vector_digest(parse_vector(values, "v"))


@pytest.mark.parametrize("text, reason", [
    ("", "is empty"),
    (_base64([0.0, 0.0]), "all zeros"),
    (_base64([1.0, float("nan")]), r"non-finite value \(nan\) at \[1\]"),
    (_base64([float("-inf"), 1.0]), r"non-finite value \(-inf\) at \[0\]"),
    ("AAAAAAA", r"is 7 characters that are not base64 \(.*\); allowed: a list of numbers, or standard base64"),
    ("AAAA AAA=", "is 9 characters that are not base64"),
    ("AAAA-_AA", "is 8 characters that are not base64"),
    ("AAAAéAAA", "is 8 characters that are not base64"),
    (_base64([1.0])[:-4] + "AAA=", r"decode to 5 bytes, not a whole number of float32 values; allowed: 4 bytes"),
    (_base64([1.0] * (MAX_DIM + 1)), f"has {MAX_DIM + 1} dimensions; at most {MAX_DIM}"),
])
def test_bad_base64_vectors_are_refused_naming_the_value_and_what_is_allowed(text, reason):
    from gateway.storage.vectors import decode_vector

    with pytest.raises(InvalidInput, match=reason):
        decode_vector(text, "vector of document 'a' chunks[0]")


def test_a_list_known_to_hold_no_boolean_is_still_checked_for_numbers():
    assert parse_vector([1, 0.5], "v", may_hold_bool=False).tolist() == [1.0, 0.5]
    for values, reason in [(["1.0"], "must be a list of numbers"), ([1.0, None], "must be a list of numbers"),
                           ([1.0, [2.0]], "must be a list of numbers"), ([float("nan")], "non-finite"),
                           ([1e39], "beyond float32's range")]:
        with pytest.raises(InvalidInput, match=reason):
            parse_vector(values, "v", may_hold_bool=False)


def test_a_float32_array_beyond_range_or_not_finite_is_refused():
    for values in (np.array([1e39, 1.0]), np.array([np.nan, 1.0], dtype=np.float32)):
        with pytest.raises(InvalidInput, match=r"non-finite value at \[0\]"):
            parse_vector(values, "query vector")


def test_unit_length_scales_by_numpys_own_norm_bit_for_bit():
    from gateway.storage.vectors import unit_length

    rng = np.random.default_rng(8)
    for dim in (3, 384, 1024):
        for vector in (rng.standard_normal((50, dim)) * rng.uniform(1e-3, 1e3, (50, 1))).astype(np.float32):
            expected = (vector / np.linalg.norm(vector.astype(np.float64))).astype(np.float32)
            assert unit_length(vector).tobytes() == expected.tobytes()
