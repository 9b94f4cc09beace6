"""milvus-lite's BM25 index against the gateway's (storage/lite_sparse.py), interleaved, on a kept store.

Opens a store kept by `scale.py --keep` once and, round after round, alternating which goes first,
switches the BM25 index milvus-lite creates between its own `SparseInvertedIndex` ("engine") and
`ArrayInvertedIndex` ("arrays"), forgets every segment's built index, and times: the first BM25
search (which builds the index of every segment, as the first search after opening a store does),
then `--searches` BM25 searches (CPU a query and p50) and hybrid searches at each concurrency (p50;
c1 sends each query once, others twice), the SciFact test queries as scale.py sends them. Also
checks that both return the same hits, and with `--memory` measures what each index holds for the
store's segments (the arrays' bytes; the engine's lists by tracemalloc, slow). Usage:

    python benchmarks/scale.py --sizes 100000 --queries 10 --per-doc 10 --keep DIR
    python benchmarks/sparse_index.py DIR/scale-100000.db --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402
from common import percentile  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="a scale-<size>.db kept by scale.py --keep (its tenants/ beside it)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--searches", type=int, default=10, help="queries per mode and round")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--scifact", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "gateway-scale-cache")
    parser.add_argument("--memory", action="store_true", help="then measure each index's memory")
    args = parser.parse_args()

    from milvus_lite.index import sparse_factory

    from gateway.retrieval.options import Mode, Query, SearchOptions
    from gateway.retrieval.retrievers import CollectionRetriever
    from gateway.runtime import build_runtime
    from gateway.settings import Settings
    from gateway.storage import bulk, lite_sparse

    _, _, queries, vectors = scale.corpus_vectors(args.scifact, args.cache)
    items = [(queries[i]["text"], vectors[i]) for i in range(min(args.searches, len(queries)))]
    runtime = build_runtime(Settings(tenants_dir=args.store.parent / "tenants", milvus_uri=str(args.store)))
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    try:
        ref = runtime.registry.resolve("scale", "corpus", namespace="bench")
        retriever = CollectionRetriever(runtime.store, runtime.embedder, ref)
        sparse = SearchOptions(Mode.SPARSE, 10, fields=frozenset({"text", "title"}))
        asyncio.run(retriever.retrieve(Query(*items[0]), SearchOptions(Mode.DENSE, 10)))  # opens the store
        assert bulk.patch_engine()
        collection = bulk.engine_collection(args.store, runtime.store.physical(ref.scope).chunks)
        assert collection is not None, "the store did not open in this process's embedded engine"
        variants = {"engine": lite_sparse.original, "arrays": lite_sparse.ArrayInvertedIndex}
        figures: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
        answers: dict[str, list] = {}
        for round_ in range(args.rounds):
            for name in (list(variants) if round_ % 2 == 0 else list(variants)[::-1]):
                sparse_factory.SparseInvertedIndex = variants[name]
                segments = collection._read_snapshot()[0]
                for seg in segments:
                    seg.sparse_indexes.clear()
                out = figures[name]
                wall, cpu = time.perf_counter(), time.process_time()
                asyncio.run(retriever.retrieve(Query(*items[0]), sparse))
                out.setdefault("first_bm25_s", []).append(time.perf_counter() - wall)
                out.setdefault("first_bm25_cpu_s", []).append(time.process_time() - cpu)
                built = {type(seg.sparse_indexes.get("sparse")).__name__ for seg in segments if seg.num_rows}
                cpu = time.process_time()
                latencies, hits = scale.timed_searches(retriever, sparse, items, 1)
                out.setdefault("bm25_cpu_ms", []).append((time.process_time() - cpu) * 1000 / len(items))
                out.setdefault("bm25_p50_ms", []).append(percentile(latencies, 0.5))
                answers.setdefault(name, []).append([[(h.source_id, h.chunk_id, h.score) for h in q] for q in hits])
                for concurrency in args.concurrency:
                    work = items if concurrency == 1 else items * 2
                    hybrid = SearchOptions(Mode.HYBRID, 10, fields=frozenset({"text", "title"}))
                    latencies, _ = scale.timed_searches(retriever, hybrid, work, concurrency)
                    out.setdefault(f"hybrid_c{concurrency}_p50_ms", []).append(percentile(latencies, 0.5))
                    out.setdefault(f"hybrid_c{concurrency}_p95_ms", []).append(percentile(latencies, 0.95))
                print(f"round {round_ + 1} {name} ({', '.join(sorted(built))}, {len(segments)} segments): "
                      + json.dumps({k: round(v[-1], 3) for k, v in out.items()}), flush=True)
        assert all(a == answers["engine"][0] for a in answers["engine"] + answers["arrays"]), "the hits differ"
        print("same BM25 hits from both", flush=True)
        for name, out in figures.items():
            print(f"{name} median of {args.rounds}: "
                  + json.dumps({k: round(statistics.median(v), 3) for k, v in out.items()}), flush=True)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        if args.memory:
            memory(collection._read_snapshot()[0])
    finally:
        sparse_factory.SparseInvertedIndex = lite_sparse.ArrayInvertedIndex
        runtime.close()
    return 0


def memory(segments: list) -> None:
    """Bytes each index holds for `segments`: the arrays' own, and what building the engine's allocates
    and keeps (tracemalloc; its decoded input dicts are freed before it is read)."""
    from milvus_lite.analyzer.sparse import bytes_to_sparse

    from gateway.storage import lite_sparse

    postings = arrays = lists = 0
    for seg in (s for s in segments if s.num_rows):
        column = seg.table.column("sparse")
        index = lite_sparse.ArrayInvertedIndex()
        index.build_column(column)
        postings += len(index._rows)
        arrays += sum(a.nbytes for a in (index._rows, index._tf, index._weight, index._starts, index._doc_lengths))
        decoded = [bytes_to_sparse(r) if isinstance(r, bytes) else (r or {}) for r in column.to_pylist()]
        gc.collect()
        tracemalloc.start()
        engine = lite_sparse.original()
        engine.build(decoded)
        del decoded
        lists += tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del engine
    print(f"{postings:,} postings: arrays {arrays / 1e6:,.0f} MB (and a dict of the terms), "
          f"milvus-lite's lists {lists / 1e6:,.0f} MB", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
