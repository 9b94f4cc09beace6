"""Search a store kept by `scale.py --keep`, in a fresh process: what reopening it costs, then CPU a query.

Opens the store, runs one hybrid search (the engine loads its segments and builds BM25's index for
each), then `--searches` searches per mode, the SciFact test queries as scale.py sends them. Meant to
run under a profiler, which can attach once "searching" is printed, for example:

    python benchmarks/scale_search.py /tmp/million/scale-1000000.db &
    py-spy record --pid $! --native -r 25 -f raw -o profile.txt   # after "searching"

With `--efs`, a sweep of HNSW's search depth instead: for each of `--queries` SciFact test queries,
a dense (10 hits) and a hybrid search at every ef of the list (`default`: the collection's own
settings), the efs in an order rotated per query so that the machine's load falls on all of them
alike; then per ef dense recall@10 against exact search (strict and with epsilon 0.01, as
`--recall`) on each half of the queries (even and odd positions) and on all, and dense and hybrid
p50/p95 and mean CPU a search (this process's, which holds the engine). The smallest ef whose
epsilon (and strict) recall reaches `--target` on one half is reported with its recall on the
other, both ways round (`--per-doc` as the store was written):

    python benchmarks/scale_search.py /tmp/million/scale-1000000.db --per-doc 10 --pause 0 \
        --efs default,64,96,128,192,256,384 --queries 300
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402

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
    parser.add_argument("--efs", help="comma-separated HNSW search depths to sweep (`default`: the collection's own)")
    parser.add_argument("--queries", type=int, default=300, help="SciFact test queries the sweep searches")
    parser.add_argument("--target", type=float, default=0.95, help="the epsilon recall@10 the sweep's choice must reach")
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
        if args.efs:
            sweep(args, runtime, ref, retriever, queries, vectors)
            return 0
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


def sweep(args, runtime, ref, retriever, queries, vectors) -> None:
    """Dense recall@10 and dense and hybrid latency per ef of `args.efs` (module docstring)."""
    from gateway.retrieval.options import Mode, Query, SearchOptions
    from common import percentile

    efs: list[int | None] = [None if e == "default" else int(e) for e in args.efs.split(",")]
    own = runtime.store.index_policy(ref.scope)
    picked = list(range(min(args.queries, len(queries))))
    modes = {mode: SearchOptions(mode, 10, fields=frozenset({"text", "title"})) for mode in (Mode.DENSE, Mode.HYBRID)}
    ms: dict = {(ef, mode): [] for ef in efs for mode in modes}
    cpu_ms: dict = {(ef, mode): [] for ef in efs for mode in modes}  # the process's, which holds the engine
    found: dict = {ef: {} for ef in efs}
    answered: dict = {}
    started = time.perf_counter()
    for n, i in enumerate(picked):
        for ef in efs[n % len(efs):] + efs[:n % len(efs)]:
            runtime.store.set_index_policy(ref.scope, own if ef is None else dataclasses.replace(own, ef=ef))
            answered.setdefault(ef, runtime.store.dense_index(ref.scope, 10).describe())
            for mode, options in modes.items():
                began, cpu = time.perf_counter(), time.process_time()
                hits = asyncio.run(retriever.retrieve(Query(queries[i]["text"], vector=vectors[i]), options))
                ms[ef, mode].append((time.perf_counter() - began) * 1000)
                cpu_ms[ef, mode].append((time.process_time() - cpu) * 1000)
                if mode is Mode.DENSE:
                    found[ef][i] = [scale._chunk_number(h, args.per_doc) for h in hits]
    runtime.store.set_index_policy(ref.scope, own)
    print(f"{len(picked)} queries x {len(efs)} efs searched in {time.perf_counter() - started:.0f} s", flush=True)
    docs, base, _, _ = scale.corpus_vectors(args.scifact, args.cache)
    replicas = scale.Replicas(docs, base, args.noise)
    size = int(args.store.stem.removeprefix("scale-"))
    exact = scale.exact_top(replicas, size, vectors[picked])
    halves = {"A": picked[0::2], "B": picked[1::2], "all": picked}
    rows = []
    for ef in efs:
        strict, loose = scale.recalls(replicas, vectors[picked], exact, [found[ef][i] for i in picked])
        by_query = {i: (s, e) for i, s, e in zip(picked, strict, loose)}
        row = {"ef": "default" if ef is None else ef, "index": answered[ef]}
        for half, members in halves.items():
            row[f"strict_{half}"] = float(np.mean([by_query[i][0] for i in members]))
            row[f"eps_{half}"] = float(np.mean([by_query[i][1] for i in members]))
        for mode in modes:
            row[f"{mode.value}_p50_ms"] = percentile(ms[ef, mode], 0.5)
            row[f"{mode.value}_p95_ms"] = percentile(ms[ef, mode], 0.95)
            row[f"{mode.value}_cpu_ms"] = float(np.mean(cpu_ms[ef, mode]))
        rows.append(row)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    print(f"| ef | index as searched | strict recall@10 A / B / all | epsilon recall@10 A / B / all "
          f"| dense p50 / p95 ms, CPU | hybrid p50 / p95 ms, CPU |")
    for row in rows:
        print(f"| {row['ef']} | {row['index']} | {row['strict_A']:.3f} / {row['strict_B']:.3f} / {row['strict_all']:.3f} "
              f"| {row['eps_A']:.3f} / {row['eps_B']:.3f} / {row['eps_all']:.3f} "
              f"| {row['dense_p50_ms']:.1f} / {row['dense_p95_ms']:.1f}, {row['dense_cpu_ms']:.1f} "
              f"| {row['hybrid_p50_ms']:.1f} / {row['hybrid_p95_ms']:.1f}, {row['hybrid_cpu_ms']:.1f} |")
    numbered = sorted((row for row in rows if row["ef"] != "default"), key=lambda row: row["ef"])
    for measure in ("eps", "strict"):
        for chosen_on, reported_on in (("A", "B"), ("B", "A")):
            chosen = next((row for row in numbered if row[f"{measure}_{chosen_on}"] >= args.target), None)
            if chosen is None:
                print(f"{measure} >= {args.target} chosen on {chosen_on}: no ef reaches it", flush=True)
            else:
                print(f"{measure} >= {args.target} chosen on {chosen_on}: ef {chosen['ef']} "
                      f"({chosen[f'{measure}_{chosen_on}']:.3f}); on {reported_on}: epsilon "
                      f"{chosen[f'eps_{reported_on}']:.3f}, strict {chosen[f'strict_{reported_on}']:.3f}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
