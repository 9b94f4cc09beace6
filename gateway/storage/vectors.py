"""A client's dense vectors, checked once at the boundary: finite float32 numbers of the
collection's size (the `dense` field's), and their digest for content hashes.

A vector comes as a list of numbers or, in ingest files, as base64 text of its little-endian
float32 bytes (what embedding APIs return with `encoding_format: "base64"`): a quarter of the JSON
and decoded without a Python float per element.
"""

from __future__ import annotations

import binascii
import hashlib
from enum import StrEnum

import numpy as np

from gateway.errors import DimensionMismatch, InvalidInput

# Milvus's own ceiling for a float vector field.
MAX_DIM = 32_768
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class VectorEncoding(StrEnum):
    """How an ingest file gives its vectors; one file uses one."""

    LIST = "a list of numbers"
    BASE64 = "base64 text"

    @classmethod
    def of(cls, value: object) -> VectorEncoding | None:
        """The encoding `value` is in (None: neither, refused when read)."""
        return cls.BASE64 if isinstance(value, str) else cls.LIST if isinstance(value, list) else None


def read_vector(value: object, where: str, *, may_hold_bool: bool = True) -> np.ndarray:
    """A vector of an ingest file, in either encoding (`decode_vector`, `parse_vector`)."""
    if isinstance(value, str):
        return decode_vector(value, where)
    return parse_vector(value, where, may_hold_bool=may_hold_bool)


def parse_vector(values: object, where: str, *, may_hold_bool: bool = True) -> np.ndarray:
    """A client's vector as float32, checked: a non-empty list of finite numbers, at most MAX_DIM.

    `may_hold_bool=False`: the caller knows no JSON boolean is in it (its line has no `true` or
    `false`), so the check of each element's type, a third of the cost of a 384-d list, is skipped."""
    if isinstance(values, np.ndarray):
        with np.errstate(over="ignore"):  # beyond float32's range: inf, refused next
            vector = values.astype(np.float32, copy=False).reshape(-1)
        if not np.isfinite(vector).all():  # a float64 beyond float32's range becomes inf
            bad = int(np.flatnonzero(~np.isfinite(vector))[0])
            raise InvalidInput(f"{where} has a non-finite value at [{bad}] (or one beyond float32's range); "
                               "allowed: finite float32 numbers")
    else:
        # One conversion in C, then the kind of what came out: this runs once per chunk of a bulk load.
        try:
            parsed = np.asarray(values) if isinstance(values, (list, tuple)) else None
        except ValueError:  # ragged nesting
            parsed = None
        if (parsed is None or parsed.ndim != 1 or parsed.dtype.kind not in "fiu"
                or (may_hold_bool and bool in map(type, values))):
            raise InvalidInput(f"{where} must be a list of numbers, got {_kind(values)}")
        if not np.isfinite(parsed).all():
            bad = int(np.flatnonzero(~np.isfinite(parsed))[0])
            raise InvalidInput(f"{where} has a non-finite value ({values[bad]!r}) at [{bad}]; allowed: finite numbers")
        if parsed.dtype.kind == "f" and parsed.size and float(np.abs(parsed).max()) > _FLOAT32_MAX:
            bad = int(np.flatnonzero(np.abs(parsed) > _FLOAT32_MAX)[0])
            raise InvalidInput(f"{where} has a value at [{bad}] beyond float32's range; allowed: finite float32 numbers")
        vector = parsed.astype(np.float32)
    return _checked(vector, where)


def decode_vector(text: str, where: str) -> np.ndarray:
    """A vector sent as base64 text of its little-endian float32 bytes, checked as `parse_vector` checks a list."""
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: a non-ASCII character
        raise InvalidInput(f"{where} is {len(text)} characters that are not base64 ({exc}); allowed: a list of "
                           "numbers, or standard base64 (A-Z a-z 0-9 + /, '=' padding) of little-endian float32 "
                           "values") from None
    if len(raw) % 4:
        raise InvalidInput(f"{where} is {len(text)} characters of base64 that decode to {len(raw)} bytes, not a "
                           "whole number of float32 values; allowed: 4 bytes (little-endian float32) per dimension")
    vector = np.frombuffer(raw, dtype="<f4")
    if vector.size and not np.isfinite(vector).all():
        bad = int(np.flatnonzero(~np.isfinite(vector))[0])
        raise InvalidInput(f"{where} has a non-finite value ({float(vector[bad])!r}) at [{bad}]; "
                           "allowed: finite numbers")
    return _checked(vector.astype(np.float32), where)  # a writable copy in the machine's order


def _checked(vector: np.ndarray, where: str) -> np.ndarray:
    """Size and direction; finiteness is checked where each form is read."""
    if vector.size == 0:
        raise InvalidInput(f"{where} is empty; send the collection's number of dimensions")
    if vector.size > MAX_DIM:
        raise InvalidInput(f"{where} has {vector.size} dimensions; at most {MAX_DIM}")
    if not vector.any():
        raise InvalidInput(f"{where} is all zeros, which has no direction to compare by cosine")
    return vector


def check_dimension(vector: np.ndarray, dim: int, where: str, label: str) -> None:
    if vector.size != dim:
        raise DimensionMismatch(f"{where} has {vector.size} dimensions; collection {label} stores {dim}")


def unit_length(vector: np.ndarray) -> np.ndarray:
    """The vector scaled to length 1, as float32: what is stored. Cosine ranks it as the vector it came
    from, and every stored vector is then unit length, as embedders write them (`gateway verify`)."""
    vector = np.asarray(vector, dtype=np.float32)
    wide = vector.astype(np.float64).reshape(-1)
    # np.linalg.norm's own sum for a 1-d float64 array (sqrt of the dot product), without its Python
    # overhead: bit for bit the length every stored vector was scaled by, so content hashes stay put.
    return (vector / np.sqrt(wide.dot(wide))).astype(np.float32)


def vector_digest(vector: np.ndarray) -> str:
    """sha256 of the vector as little-endian float32: what the content hash covers."""
    return hashlib.sha256(np.ascontiguousarray(vector, dtype="<f4").tobytes()).hexdigest()


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
