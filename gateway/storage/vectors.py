"""A client's dense vectors, checked once at the boundary: finite float32 numbers of the
collection's size (the `dense` field's), and their digest for content hashes."""

from __future__ import annotations

import hashlib

import numpy as np

from gateway.errors import DimensionMismatch, InvalidInput

# Milvus's own ceiling for a float vector field.
MAX_DIM = 32_768


def parse_vector(values: object, where: str) -> np.ndarray:
    """A client's vector as float32, checked: a non-empty list of finite numbers, at most MAX_DIM."""
    if isinstance(values, np.ndarray):
        vector = values.astype(np.float32, copy=False).reshape(-1)
    else:
        # One conversion in C, then the kind of what came out: this runs once per chunk of a bulk load.
        try:
            parsed = np.asarray(values) if isinstance(values, (list, tuple)) else None
        except ValueError:  # ragged nesting
            parsed = None
        if parsed is None or parsed.ndim != 1 or parsed.dtype.kind not in "fiu" or bool in map(type, values):
            raise InvalidInput(f"{where} must be a list of numbers, got {_kind(values)}")
        if not np.isfinite(parsed).all():
            bad = int(np.flatnonzero(~np.isfinite(parsed))[0])
            raise InvalidInput(f"{where} has a non-finite value ({values[bad]!r}) at [{bad}]; allowed: finite numbers")
        with np.errstate(over="ignore"):  # beyond float32's range: inf, refused below
            vector = parsed.astype(np.float32)
    if vector.size == 0:
        raise InvalidInput(f"{where} is empty; send the collection's number of dimensions")
    if vector.size > MAX_DIM:
        raise InvalidInput(f"{where} has {vector.size} dimensions; at most {MAX_DIM}")
    if not np.isfinite(vector).all():  # a float64 beyond float32's range becomes inf
        bad = int(np.flatnonzero(~np.isfinite(vector))[0])
        raise InvalidInput(f"{where} has a value at [{bad}] beyond float32's range; allowed: finite float32 numbers")
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
    return (vector / np.linalg.norm(vector.astype(np.float64))).astype(np.float32)


def vector_digest(vector: np.ndarray) -> str:
    """sha256 of the vector as little-endian float32: what the content hash covers."""
    return hashlib.sha256(np.ascontiguousarray(vector, dtype="<f4").tobytes()).hexdigest()


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
