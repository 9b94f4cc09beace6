"""milvus-lite's brute-force dense search (its FLAT index) without copying the collection per query.

milvus-lite 3.2.2's `BruteForceIndex.search` copies the valid rows out of the segment's vector
matrix, then normalises every one of them again for each cosine query (a second N x dim copy) and
only then multiplies: three passes and two allocations of the whole matrix per query, about 380 ms
of CPU at 100,000 384-d rows (benchmarks/scale.py, profiled with py-spy). `search` here multiplies
the segment's matrix in place and divides by row norms computed once per segment, then masks:
the same distances (1 - cosine, zero vectors at 1), the same result layout.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

# Row norms of the last segments searched (a float per row); a segment's matrix is immutable.
_NORMS: OrderedDict[int, tuple[weakref.ref, np.ndarray]] = OrderedDict()
_MAX_CACHED = 512


def _norms(vectors: np.ndarray) -> np.ndarray:
    key = id(vectors)
    cached = _NORMS.get(key)
    if cached is not None and cached[0]() is vectors:
        _NORMS.move_to_end(key)
        return cached[1]
    norms = np.linalg.norm(vectors, axis=1)
    norms[norms == 0] = 1.0  # as milvus-lite: a zero vector's cosine similarity is 0
    _NORMS[key] = (weakref.ref(vectors), norms)
    if len(_NORMS) > _MAX_CACHED:
        _NORMS.popitem(last=False)
    return norms


def search(self: Any, queries: np.ndarray, top_k: int, valid_mask: np.ndarray | None = None,
           params: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """BruteForceIndex.search for COSINE; other metrics go to the engine's own."""
    if self.metric != "COSINE" or self.num_vectors == 0 or top_k <= 0:
        return _original(self, queries, top_k, valid_mask, params)
    queries = np.asarray(queries, dtype=np.float32).reshape(-1, self.dim)
    nq = queries.shape[0]
    result_ids = np.full((nq, top_k), -1, dtype=np.int64)
    result_dists = np.full((nq, top_k), np.inf, dtype=np.float32)
    if valid_mask is not None and valid_mask.shape[0] != self.num_vectors:
        raise ValueError(f"valid_mask length {valid_mask.shape[0]} != num_vectors {self.num_vectors}")
    valid = self.num_vectors if valid_mask is None else int(np.count_nonzero(valid_mask))
    if valid == 0:
        return result_ids, result_dists
    q_norms = np.linalg.norm(queries, axis=1, keepdims=True)
    q_unit = queries / np.where(q_norms == 0, 1.0, q_norms)
    dists = np.maximum(1.0 - (q_unit @ self._vectors.T) / _norms(self._vectors), 0.0).astype(np.float32)
    if valid_mask is not None:
        dists[:, np.logical_not(valid_mask)] = np.inf
    k = min(top_k, valid)
    for q in range(nq):
        row = dists[q]
        part = np.argpartition(row, k - 1)[:k] if k < row.size else np.arange(row.size)
        order = part[np.argsort(row[part], kind="stable")][:k]
        result_ids[q, :k] = order
        result_dists[q, :k] = row[order]
    return result_ids, result_dists


_original: Any = None


def patch() -> None:
    global _original
    from milvus_lite.index.brute_force import BruteForceIndex

    if _original is None:
        _original = BruteForceIndex.search
        BruteForceIndex.search = search
