"""milvus-lite's BM25 index (SparseInvertedIndex) with posting lists as numpy arrays.

milvus-lite 3.2.2 keeps each segment's BM25 postings as Python lists of (row, tf) tuples, built by
appending posting by posting (its first BM25 search after a store is opened spent 32 s of 49 doing
so at 1,000,000 chunks, and 9 s more decoding the stored sparse vectors into dicts), and scores a
query by walking every posting of every query term in Python, then sorting every scored row
(about 0.45 s of CPU a search at a million chunks). `ArrayInvertedIndex` holds one array of rows,
one of term frequencies and one of precomputed BM25 term weights per term (compressed-sparse-row
over the segment's sorted terms), builds them by flattening the segment at once (from the stored
Arrow column when it has one, `build_column`), and scores with numpy: each query term's
contributions added into a float32 array the size of the segment (`np.add.at`), the top k kept by
partition. Rows are `intp` (numpy converts narrower index arrays on every fancy index: 3x slower);
16 bytes a posting in all, against about 70 for the engine's tuples.

The arithmetic is the engine's, operation by operation in the same float32/float64 types (NumPy 2's
scalar promotion: the engine's per-posting expression mixes Python floats with the float32 document
lengths, so it is evaluated in float32), and sums run in the engine's order: scores are bit-for-bit
the engine's. Ties keep its order too: the engine sorts a dict of scores stably, so equal scores stay
in the order rows were first scored (by the first query term that reached them, then by row); that
is the tie-break here, looked up (binary search in the sorted posting lists) for the few rows at or
above the k-th score only. Rows a query term reaches are hits even at a score of zero, as in the
engine. Not the same: `build_column` reads a cell repeating a term through the engine's dict
decoding (which keeps the last value), and `_posting_lists`/`_df` are computed on each read. tests/storage/test_lite_sparse.py compares both on random corpora and through a collection.
"""

from __future__ import annotations

import json
import math
from itertools import chain
from operator import methodcaller
from typing import Any

import numpy as np
import pyarrow as pa
from milvus_lite.index.sparse_common import empty_results, validate_mask
from milvus_lite.index.sparse_inverted import SparseInvertedIndex

# A stored sparse vector is pairs of (uint32 little-endian term, float32 little-endian value),
# milvus-lite's analyzer/sparse.py encoding (Milvus's SparseFloatArray contents).
_PAIR = np.dtype([("term", "<u4"), ("value", "<f4")])


class ArrayInvertedIndex(SparseInvertedIndex):
    """SparseInvertedIndex's contract (build, search, save, load; same results) over numpy arrays."""

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self.doc_count = 0
        self.avgdl = 0.0
        self._doc_lengths = np.array([], dtype=np.float32)
        self._slot: dict[int, int] = {}
        self._starts = np.zeros(1, dtype=np.int64)
        self._rows = np.array([], dtype=np.intp)  # intp: numpy indexes with it without a conversion
        self._tf = np.array([], dtype=np.float32)
        self._weight = np.array([], dtype=np.float32)

    def build(self, sparse_vectors: list[dict[int, float]], valid_mask: np.ndarray | None = None) -> None:
        n = len(sparse_vectors)
        valid_mask = validate_mask(valid_mask, n)
        counts = np.fromiter(map(len, sparse_vectors), dtype=np.int64, count=n)
        total = int(counts.sum())
        terms = np.fromiter(chain.from_iterable(sparse_vectors), dtype=np.int64, count=total)
        values = np.fromiter(chain.from_iterable(map(methodcaller("values"), sparse_vectors)), dtype=np.float64,
                             count=total)
        self._index(n, np.repeat(np.arange(n, dtype=np.intp), counts), terms, values, valid_mask)

    def build_column(self, column: pa.Array | pa.ChunkedArray, valid_mask: np.ndarray | None = None) -> None:
        """`build` from a segment's stored sparse column (binary cells as milvus-lite writes them, or dicts)."""
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        decoded = [_decode(chunk) for chunk in chunks]
        if any(part is None for part in decoded):
            from milvus_lite.analyzer.sparse import bytes_to_sparse

            self.build([bytes_to_sparse(r) if isinstance(r, bytes) else (r or {}) for r in column.to_pylist()],
                       valid_mask)
            return
        n = len(column)
        valid_mask = validate_mask(valid_mask, n)
        rows, offset = [], 0
        for chunk, (pair_rows, _) in zip(chunks, decoded):
            rows.append(pair_rows + offset)
            offset += len(chunk)
        pairs = np.concatenate([pair for _, pair in decoded]) if decoded else np.zeros(0, _PAIR)
        self._index(n, np.concatenate(rows) if rows else np.zeros(0, np.intp), pairs["term"].astype(np.int64),
                    pairs["value"].astype(np.float64), valid_mask)

    def _index(self, n: int, rows: np.ndarray, terms: np.ndarray, values: np.ndarray,
               valid_mask: np.ndarray | None) -> None:
        """Postings from one (row, term, value) triple per stored pair, rows ascending."""
        if valid_mask is not None:
            keep = valid_mask[rows]
            rows, terms, values = rows[keep], terms[keep], values[keep]
        # float64 sums in row order, as the engine's sum(sv.values()) and its running total.
        lengths = np.bincount(rows, weights=values, minlength=n)
        valid_count = n if valid_mask is None else int(np.count_nonzero(valid_mask))
        total_length = float(np.cumsum(lengths)[-1]) if n else 0.0
        self.doc_count = valid_count
        self.avgdl = total_length / valid_count if valid_count > 0 else 0.0
        self._doc_lengths = lengths.astype(np.float32)

        order = np.argsort(terms, kind="stable")  # within a term, rows stay ascending: the engine's posting order
        terms, self._rows, self._tf = terms[order], rows[order].astype(np.intp), values[order].astype(np.float32)
        edges = np.flatnonzero(terms[1:] != terms[:-1]) + 1
        firsts = np.concatenate(([0], edges)) if len(terms) else edges
        self._starts = np.append(firsts, len(terms)).astype(np.int64)
        self._slot = dict(zip(terms[firsts].tolist(), range(len(firsts))))
        self._weight = self._term_weights(values[order])

    def _term_weights(self, tf: np.ndarray) -> np.ndarray:
        """tf·(k1+1) / (tf + k1·(1-b+b·dl/avgdl)) per posting, typed as the engine's expression is."""
        k1, b = self.k1, self.b
        avgdl = self.avgdl if self.avgdl > 0 else 1.0
        f32 = np.float32
        dl = self._doc_lengths[self._rows]
        norm = f32(k1) * (f32(1.0 - b) + f32(b) * dl / f32(avgdl))
        return (tf * (k1 + 1.0)).astype(f32) / (tf.astype(f32) + norm)

    def search(self, query_sparse_vectors: list[dict[int, float]], top_k: int,
               valid_mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        n = len(self._doc_lengths)
        valid_mask = validate_mask(valid_mask, n)
        nq = len(query_sparse_vectors)
        all_ids, all_dists = empty_results(nq, top_k)
        if self.doc_count == 0:
            return all_ids, all_dists
        if valid_mask is not None and valid_mask.all():
            valid_mask = None
        for qi, query in enumerate(query_sparse_vectors):
            if query and top_k > 0:
                found = self._top(query, top_k, n, valid_mask)
                all_ids[qi, :len(found[0])], all_dists[qi, :len(found[0])] = found
        return all_ids, all_dists

    def _top(self, query: dict[int, float], top_k: int, n: int,
             valid_mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """One query's best rows and their distances (-score), in the engine's order."""
        scores = np.zeros(n, dtype=np.float32)
        # While every contribution is above 0 (BM25's usual case: idf > 0, tf > 0, a query weight > 0),
        # the rows the terms reached are those scoring above 0; from the first that is not, they are marked.
        reached: np.ndarray | None = None
        postings: list[np.ndarray] = []
        for term, query_weight in query.items():
            slot = self._slot.get(term)
            if slot is None:
                postings.append(self._rows[:0])
                continue
            start, stop = int(self._starts[slot]), int(self._starts[slot + 1])
            df = stop - start
            idf = math.log((self.doc_count - df + 0.5) / (df + 0.5) + 1.0)
            rows, weight = self._rows[start:stop], self._weight[start:stop]
            postings.append(rows)
            if valid_mask is not None:
                keep = valid_mask[rows]
                rows, weight = rows[keep], weight[keep]
            contribution = np.float32(idf) * weight * np.float32(query_weight)
            if reached is None and len(contribution) and not contribution.min() > 0:
                reached = scores > 0
            # float32 additions in query-term order, the engine's; rows are unique within a posting list.
            np.add.at(scores, rows, contribution)
            if reached is not None:
                reached[rows] = True
        rows = np.flatnonzero(scores > 0 if reached is None else reached)
        best = scores[rows]
        if len(rows) > top_k:
            kth = np.partition(best, len(best) - top_k)[len(best) - top_k]
            within = best >= kth  # every row tied with the k-th, so the tie-break picks among them
            rows, best = rows[within], best[within]
        order = np.lexsort((rows, self._first_terms(postings, rows), -best))[:top_k]
        return rows[order], -best[order]

    @staticmethod
    def _first_terms(postings: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
        """For each row, the first query term whose posting list holds it: the engine's tie order."""
        first = np.full(len(rows), len(postings), dtype=np.int64)
        for t in range(len(postings) - 1, -1, -1):
            posting = postings[t]  # rows ascending
            at = np.minimum(np.searchsorted(posting, rows), max(len(posting) - 1, 0))
            held = posting[at] == rows if len(posting) else np.zeros(len(rows), dtype=bool)
            first[held] = t
        return first

    @property
    def _posting_lists(self) -> dict[int, list[tuple[int, float]]]:
        """The engine's term -> [(row, tf)] form (for `save` and anything that reads it)."""
        rows, tf = self._rows.tolist(), self._tf.tolist()
        starts = self._starts.tolist()
        return {term: list(zip(rows[starts[s]:starts[s + 1]], tf[starts[s]:starts[s + 1]]))
                for term, s in self._slot.items()}

    @property
    def _df(self) -> dict[int, int]:
        counts = np.diff(self._starts).tolist()
        return {term: counts[s] for term, s in self._slot.items()}

    def save(self, path: str) -> None:
        """The engine's JSON file, which its own `load` reads back."""
        data = {"k1": self.k1, "b": self.b, "doc_count": self.doc_count, "avgdl": self.avgdl,
                "doc_lengths": self._doc_lengths.tolist(),
                "posting_lists": {str(k): v for k, v in self._posting_lists.items()},
                "df": {str(k): v for k, v in self._df.items()}}
        with open(path, "w") as f:
            json.dump(data, f)

    @classmethod
    def load(cls, path: str, k1: float = 1.5, b: float = 0.75) -> ArrayInvertedIndex:
        """An index saved by `save` or by the engine's own SparseInvertedIndex."""
        with open(path) as f:
            data = json.load(f)
        idx = cls(k1=data.get("k1", k1), b=data.get("b", b))
        idx.doc_count = data["doc_count"]
        idx.avgdl = data["avgdl"]
        idx._doc_lengths = np.array(data["doc_lengths"], dtype=np.float32)
        postings = data["posting_lists"]
        terms = sorted(int(k) for k in postings)
        lists = [postings[str(term)] for term in terms]
        sizes = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        flat = np.array(list(chain.from_iterable(lists)), dtype=np.float64).reshape(-1, 2)
        idx._slot = {term: s for s, term in enumerate(terms)}
        idx._starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        idx._rows = flat[:, 0].astype(np.intp)
        idx._tf = flat[:, 1].astype(np.float32)
        idx._weight = idx._term_weights(flat[:, 1])
        return idx


def _decode(chunk: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """(row of each pair, the pairs) of a binary column chunk; None when it is not one this reads
    (another type, or a cell repeating a term, which the engine's dict would collapse)."""
    if not (pa.types.is_binary(chunk.type) or pa.types.is_large_binary(chunk.type)):
        return None
    if chunk.null_count:
        chunk = chunk.fill_null(b"")
    n = len(chunk)
    offset_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
    offsets = np.frombuffer(chunk.buffers()[1], dtype=offset_type)[chunk.offset:chunk.offset + n + 1].astype(np.int64)
    sizes = np.diff(offsets)
    if np.any(sizes % _PAIR.itemsize):
        return None
    data = chunk.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8)[offsets[0]:offsets[-1]] if data is not None else np.zeros(0, np.uint8)
    pairs = raw.view(_PAIR) if len(raw) else np.zeros(0, _PAIR)
    rows = np.repeat(np.arange(n, dtype=np.intp), sizes // _PAIR.itemsize)
    if np.any((pairs["term"][1:] == pairs["term"][:-1]) & (rows[1:] == rows[:-1])):
        return None
    return rows, pairs


def build(index: Any, column: pa.Array | pa.ChunkedArray) -> None:
    """Build a freshly created engine sparse index from a segment's stored column, through
    `build_column` when it is an ArrayInvertedIndex (the engine's other indexes take the decoded dicts)."""
    if isinstance(index, ArrayInvertedIndex):
        index.build_column(column)
        return
    from milvus_lite.analyzer.sparse import bytes_to_sparse

    index.build([bytes_to_sparse(r) if isinstance(r, bytes) else (r or {}) for r in column.to_pylist()])


original: Any = None


def patch() -> None:
    """Make milvus-lite create ArrayInvertedIndex for BM25 fields (once)."""
    global original
    from milvus_lite.index import sparse_factory

    if original is None:
        original = sparse_factory.SparseInvertedIndex
        sparse_factory.SparseInvertedIndex = ArrayInvertedIndex
