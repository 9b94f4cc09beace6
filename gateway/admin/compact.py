"""Compaction: rewrite a collection from its live rows (shared by `gateway compact` and the admin API)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.storage.milvus import MilvusStore
from gateway.tenancy.registry import CollectionRef


@dataclass(frozen=True, slots=True)
class Compacted:
    collection: str          # namespace/collection
    rows: int                # live rows rewritten
    seconds: float
    skipped: str | None = None  # why nothing was done ("not ingested")

    def summary(self) -> dict[str, object]:
        line: dict[str, object] = {"collection": self.collection, "rows": self.rows, "seconds": self.seconds}
        if self.skipped:
            line["skipped"] = self.skipped
        return line


def compact(store: MilvusStore, ref: CollectionRef,
            on_rows: Callable[[str, int], None] | None = None) -> Compacted:
    """MilvusStore.rebuild, so milvus-lite's BM25 statistics forget deleted rows (docs/operations.md).
    `on_rows(step, rows)`: the rebuild's progress ("copy", then "rewrite")."""
    if not store.exists(ref.scope):
        return Compacted(ref.label, 0, 0.0, "not ingested")
    started = time.perf_counter()
    rows = store.rebuild(ref.scope, on_rows=on_rows)
    return Compacted(ref.label, rows, round(time.perf_counter() - started, 2))
