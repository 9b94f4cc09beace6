"""Every recipe of the brief over the cached features; prints tables, writes results_<T>.json.
  OMP_NUM_THREADS=1 python benchmarks/late_interaction/grid.py [--tokens 256]
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np

import features as F
from mslib import EXP, minmax, ndcg_vector, paired, qrels, ranks, rerank_run, score

KS = [10, 20, 30, 50, 100]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=256)
    a = p.parse_args()
    feats = F.load(a.tokens)
    qids = sorted(qrels())
    hybrid = {q: feats[q]["ids"] for q in qids}
    results: dict[str, dict] = {}
    vectors: dict[str, np.ndarray] = {}

    def record(name: str, run: dict) -> float:
        s = score(run)
        results[name] = {k: round(v, 4) for k, v in s.items()}
        vectors[name] = ndcg_vector(run)
        return s["ndcg@10"]

    def rerank(name: str, k: int, fn, lists=hybrid) -> float:
        new = {q: fn(feats[q], k) for q in qids}
        return record(name, rerank_run(lists, new, k))

    # -- baselines
    record("hybrid (weighted a=0.5)", rerank_run(hybrid, {q: np.zeros(1) for q in qids}, 0))
    record("dense", rerank_run({q: feats[q]["dense_ids"] for q in qids}, {q: np.zeros(1) for q in qids}, 0))
    record("sparse (BM25)", rerank_run({q: feats[q]["sparse_ids"] for q in qids}, {q: np.zeros(1) for q in qids}, 0))
    base = vectors["hybrid (weighted a=0.5)"]

    # -- 2. MaxSim alone, all [CLS]/[SEP] variants, sum vs mean
    for (qs, ds), k in itertools.product(F.VARIANTS, KS):
        rerank(f"maxsim q={qs} d={ds} K={k}", k, lambda f, k, v=(qs, ds): f["ms"][v][:k])
    for k in KS:  # mean over query tokens: a per-query constant factor, so the same order
        rerank(f"maxsim-mean q=none d=none K={k}", k, lambda f, k: f["ms"][("none", "none")][:k] / f["nq"]["none"])

    V = ("none", "none")  # the gateway's token_vectors convention; variants compared below

    # -- 3b. RRF of hybrid rank and MaxSim rank (within top-K), k=60, weight on MaxSim
    for k, wm in itertools.product(KS, [0.5, 1.0, 1.5, 2.0, 3.0]):
        def fn(f, k, wm=wm):
            rm = ranks(f["ms"][V][:k])
            rh = np.arange(1, k + 1)
            return 1 / (60 + rh) + wm / (60 + rm)
        rerank(f"rrf(hybrid, maxsim) wm={wm} K={k}", k, fn)

    # -- 3c. min-max weighted sum of fused score and MaxSim, w on MaxSim
    for k, w in itertools.product(KS, [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]):
        for v in F.VARIANTS:
            if v != V and k not in (20, 30):
                continue
            def fn(f, k, w=w, v=v):
                return w * minmax(f["ms"][v][:k]) + (1 - w) * minmax(f["fused"][:k])
            tag = "" if v == V else f" q={v[0]} d={v[1]}"
            rerank(f"mm(fused, maxsim) w={w} K={k}{tag}", k, fn)

    # -- raw sum: fused + lam * mean MaxSim (here sum vs mean does matter)
    for k, lam in itertools.product([20, 30, 50, 100], [0.5, 1, 2, 4, 8]):
        def fn(f, k, lam=lam):
            return f["fused"][:k] + lam * f["ms"][V][:k] / f["nq"]["none"]
        rerank(f"fused + {lam}*maxsim_mean K={k}", k, fn)

    # -- 3d. three-way: dense cosine, BM25, MaxSim
    grid = [(wd, ws, round(1 - wd - ws, 2)) for wd in np.arange(0, 1.01, 0.1) for ws in np.arange(0, 1.01, 0.1)
            if 1 - wd - ws > -1e-9]
    for k in KS:
        for wd, ws, wm in grid:
            wd, ws = round(float(wd), 2), round(float(ws), 2)
            def fn(f, k, wd=wd, ws=ws, wm=wm):
                return wd * minmax(f["dense"][:k]) + ws * minmax(f["sparse"][:k]) + wm * minmax(f["ms"][V][:k])
            rerank(f"mm3(dense={wd}, bm25={ws}, maxsim={wm}) K={k}", k, fn)
    for k, (wd, ws, wm) in itertools.product(KS, [(1, 1, 1), (1, 1, 2), (0.5, 1, 1), (1, 0.5, 1), (1, 1, 1.5),
                                                  (0.5, 1, 1.5), (0.5, 1, 2), (1, 1, 3)]):
        def fn(f, k, wd=wd, ws=ws, wm=wm):
            rm = ranks(f["ms"][V][:k])
            return wd / (60 + f["drank"][:k]) + ws / (60 + f["srank"][:k]) + wm / (60 + rm)
        rerank(f"rrf3(dense={wd}, bm25={ws}, maxsim={wm}) K={k}", k, fn)

    # -- 4. dense top-K MaxSim rerank (the 0.649 -> 0.700 figure), and a fused version
    dense_lists = {q: feats[q]["dense_ids"] for q in qids}
    for k in KS:
        for v in [V, ("both", "both")]:
            rerank(f"dense top-{k} -> maxsim q={v[0]} d={v[1]}", k, lambda f, k, v=v: f["ms_dense"][v][:k],
                   lists=dense_lists)

    (EXP / f"results_{a.tokens}.json").write_text(json.dumps(results, indent=0))
    np.savez(EXP / f"vectors_{a.tokens}.npz", names=np.array(list(vectors)), vecs=np.array(list(vectors.values())))

    # -- summaries
    def show(prefix: str, top: int = 400) -> None:
        rows = [(n, r) for n, r in results.items() if n.startswith(prefix)]
        for n, r in rows[:top]:
            print(f"  {r['ndcg@10']:.4f}  R@100 {r['recall@100']:.4f}  {n}")

    for prefix in ("hybrid", "dense", "sparse", "maxsim", "rrf(", "mm(", "fused +", "dense top"):
        print(f"== {prefix}")
        show(prefix)
    print("== best mm3 per K")
    for k in KS:
        rows = sorted(((r["ndcg@10"], n) for n, r in results.items() if n.startswith("mm3") and n.endswith(f"K={k}")),
                      reverse=True)[:5]
        for s, n in rows:
            print(f"  {s:.4f}  {n}")
    print("== rrf3")
    show("rrf3")
    best = sorted(results.items(), key=lambda kv: -kv[1]["ndcg@10"])[:15]
    print("== overall top 15 (with paired test vs hybrid)")
    for n, r in best:
        print(f"  {r['ndcg@10']:.4f}  {n}  {paired(base, vectors[n], trials=5000)}")


if __name__ == "__main__":
    main()
