"""Search a store kept by `scale.py --keep`, in a fresh process: what reopening it costs, then CPU a query.

Opens the store, runs one hybrid search (the engine loads its segments and builds BM25's index for
each), then `--searches` searches per mode, the SciFact test queries as scale.py sends them. Meant to
run under a profiler, which can attach once "searching" is printed, for example:

    python benchmarks/scale_search.py /tmp/million/scale-1000000.db &
    py-spy record --pid $! --native -r 25 -f raw -o profile.txt   # after "searching"
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="a scale-<size>.db kept by scale.py --keep (its tenants/ beside it)")
    parser.add_argument("--modes", default="hybrid,dense,sparse")
    parser.add_argument("--searches", type=int, default=5, help="searches per mode")
    parser.add_argument("--pause", type=float, default=4.0, help="seconds between 'searching' and the searches")
    parser.add_argument("--scifact", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "gateway-scale-cache")
    parser.add_argument("--recall", action="store_true",
                        help="dense recall@10 of --searches queries against exact search over the same replicas "
                             "(the store as scale.py wrote it: its size in its name, --per-doc and --noise as given)")
    parser.add_argument("--per-doc", type=int, default=10)
    parser.add_argument("--noise", type=float, default=0.02)
    args = parser.parse_args()

    from gateway.retrieval.options import Mode, Query, SearchOptions
    from gateway.retrieval.retrievers import CollectionRetriever
    from gateway.runtime import build_runtime
    from gateway.settings import Settings

    _, _, queries, vectors = scale.corpus_vectors(args.scifact, args.cache)
    wall, cpu = time.perf_counter(), time.process_time()
    runtime = build_runtime(Settings(tenants_dir=args.store.parent / "tenants", milvus_uri=str(args.store)))
    try:
        ref = runtime.registry.resolve("scale", "corpus", namespace="bench")
        retriever = CollectionRetriever(runtime.store, runtime.embedder, ref)
        asyncio.run(retriever.retrieve(Query(queries[0]["text"], vector=vectors[0]), SearchOptions(Mode.HYBRID, 10)))
        print(f"open and first hybrid search: {time.perf_counter() - wall:.1f} s, CPU {time.process_time() - cpu:.1f} s, "
              f"RSS {scale.rss_mb():,.0f} MB", flush=True)
        print("searching", flush=True)
        time.sleep(args.pause)
        for name in args.modes.split(","):
            options = SearchOptions(Mode(name), 10, fields=frozenset({"text", "title"}))
            wall, cpu = time.perf_counter(), time.process_time()
            for i in range(args.searches):
                asyncio.run(retriever.retrieve(Query(queries[i]["text"], vector=vectors[i]), options))
            print(f"{name}: {(time.perf_counter() - wall) / args.searches * 1000:,.0f} ms, "
                  f"CPU {(time.process_time() - cpu) / args.searches * 1000:,.0f} ms a search", flush=True)
        if args.recall:
            docs, base, _, _ = scale.corpus_vectors(args.scifact, args.cache)
            size = int(args.store.stem.removeprefix("scale-"))
            picked = list(range(args.searches))
            found = [[scale._chunk_number(h, args.per_doc)
                      for h in asyncio.run(retriever.retrieve(Query(queries[i]["text"], vector=vectors[i]),
                                                              SearchOptions(Mode.DENSE, 10)))] for i in picked]
            strict, loose = scale.recall_at_10(scale.Replicas(docs, base, args.noise), size, vectors[picked], found)
            print(f"dense recall@10 against exact: {strict:.3f} strict, {loose:.3f} with epsilon 0.01", flush=True)
        print(f"RSS {scale.rss_mb():,.0f} MB", flush=True)
    finally:
        runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
