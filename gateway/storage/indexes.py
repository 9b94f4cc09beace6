"""The dense index of a chunk collection: which one a collection gets, its build and search parameters.

A collection's tenant file chooses (`index: {dense: auto|flat|hnsw|hnsw_sq|ivf_flat|ivf_sq8, ...}`).
`auto`, the default, is exact search (FLAT) while a collection is small and HNSW from `auto_rows`
rows on milvus-lite, where the store switches a growing collection's index after a write
(storage/milvus/indexing.py); a Milvus server builds HNSW from the start, as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class DenseIndexKind(StrEnum):
    """A tenant file's `index.dense`; each but AUTO names one Milvus index type."""

    AUTO = "auto"
    FLAT = "flat"
    HNSW = "hnsw"
    HNSW_SQ = "hnsw_sq"
    IVF_FLAT = "ivf_flat"
    IVF_SQ8 = "ivf_sq8"

    @property
    def index_type(self) -> str:
        """The Milvus index type (AUTO has none of its own)."""
        return self.value.upper()


GRAPH = frozenset({"HNSW", "HNSW_SQ"})
CLUSTERED = frozenset({"IVF_FLAT", "IVF_SQ8"})
# Exact search costs about 6 ms at 10k rows and 75 ms at 100k on milvus-lite (2 cores, docs/architecture.md),
# so under ~40 ms up to here; below it a collection is exact and skips an HNSW build per flush and compaction.
AUTO_ROWS = 50_000
# HNSW graph degree and build depth: Milvus's and FAISS's defaults.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
# ef 64: recall@10 0.994 against exact search on SciFact's MiniLM vectors, nDCG@10 unchanged (docs/benchmarks.md).
HNSW_EF = 64
# The search depth when a tenant file sets no `ef`, by the collection's rows (rows from, ef). Strict recall@10
# against exact search, 300 SciFact queries (benchmarks/scale_search.py --efs, docs/benchmarks.md): at 100,000
# and 1,000,000 replicated chunks ef 64 gives 0.922 and 0.906, ef 128 0.967 and 0.960 (the smallest ef
# reaching 0.95 on either half of the queries, checked on the other), for 2 to 7 ms more a search. Below
# AUTO_ROWS `auto` searches exactly, and a named HNSW keeps ef 64 (0.994 on SciFact's 5,183 abstracts).
EF_BY_ROWS = ((0, HNSW_EF), (AUTO_ROWS, 128))
# 128 lists per segment (milvus-lite caps a segment at 100,000 rows), Milvus's default. nprobe 32: recall@10
# 0.972 on SciFact, but dense nDCG@10 0.016 below exact (64: 0.993, still 0.006 below), so no default picks IVF.
IVF_NLIST = 128
IVF_NPROBE = 32


@dataclass(frozen=True, slots=True)
class DenseIndex:
    """What a collection's dense index should be, and how to build and search it.

    >>> DenseIndex().index_type(rows=10_000, engine_default="FLAT")
    'FLAT'
    >>> DenseIndex().index_type(rows=60_000, engine_default="FLAT")
    'HNSW'
    """

    kind: DenseIndexKind = DenseIndexKind.AUTO
    auto_rows: int = AUTO_ROWS
    m: int = HNSW_M
    ef_construction: int = HNSW_EF_CONSTRUCTION
    ef: int | None = None  # None: by the collection's rows, from `ef_by_rows`
    ef_by_rows: tuple[tuple[int, int], ...] = EF_BY_ROWS
    nlist: int = IVF_NLIST
    nprobe: int = IVF_NPROBE

    def index_type(self, rows: int, engine_default: str) -> str:
        """The Milvus index type a collection of `rows` rows should have on an engine whose own
        choice is `engine_default` (FLAT on milvus-lite, HNSW on a server)."""
        if self.kind is not DenseIndexKind.AUTO:
            return self.kind.index_type
        if engine_default != "FLAT":
            return engine_default
        return "HNSW" if rows >= self.auto_rows else "FLAT"

    def build_params(self, index_type: str) -> dict[str, Any]:
        if index_type in GRAPH:
            return {"M": self.m, "efConstruction": self.ef_construction}
        if index_type in CLUSTERED:
            return {"nlist": self.nlist}
        return {}

    def search_ef(self, rows: int | None) -> int:
        """The search depth of a graph index over a collection of `rows` rows (None: not known yet):
        the tenant file's `ef` when it sets one, else `default_ef(rows)`."""
        return self.ef if self.ef is not None else default_ef(rows, self.ef_by_rows)

    def search_params(self, index_type: str, limit: int, rows: int | None = None) -> dict[str, Any]:
        """What a search of an index of `index_type` over `rows` rows passes as `params` (Milvus
        needs ef >= limit)."""
        if index_type in GRAPH:
            return {"ef": max(self.search_ef(rows), limit)}
        if index_type in CLUSTERED:
            return {"nprobe": self.nprobe}
        return {}


def default_ef(rows: int | None, tiers: tuple[tuple[int, int], ...] = EF_BY_ROWS) -> int:
    """HNSW's search depth for a collection of `rows` rows when its tenant file sets none: the ef of
    the last of `tiers` (rows from, ef) it has reached; None, a collection not counted yet, gets the first."""
    reached = [ef for start, ef in tiers if start <= (rows or 0)]
    return reached[-1] if reached else tiers[0][1]


@dataclass(frozen=True, slots=True)
class IndexState:
    """A collection's dense index as built, for statistics and traces."""

    index_type: str
    build: dict[str, Any]
    search: dict[str, Any]

    def describe(self) -> str:
        """`HNSW (M=16, efConstruction=200; ef=64)`, `FLAT`."""
        parts = [", ".join(f"{k}={v}" for k, v in self.build.items()),
                 ", ".join(f"{k}={v}" for k, v in self.search.items())]
        inside = "; ".join(p for p in parts if p)
        return f"{self.index_type} ({inside})" if inside else self.index_type
