"""2-fold cross-validation of rerank settings over the SciFact test queries (issue 11, item 3).

Reads the hybrid top-100 per query (benchmarks/quality/dump_candidates.py), token vectors
and pooled 512-token embeddings (benchmarks/quality/precompute.py). For every setting the gateway's
rerankers can express — lateInteraction over topK with a weighted or rrf blend — it scores nDCG@10
per query. The 300 queries are split in two by a fixed seed; each half chooses the setting that is
best on it, which is then scored on the other half. Also reports, as a diagnostic not used for the
choice, a pooled 512-token dense cosine as a rerank signal (1 vector per chunk instead of ~325).

  LI_WORKDIR=... SCIFACT_DIR=...\
    python benchmarks/quality/cv.py [--seed 11] [--splits 200]
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
from mslib import EXP, TokenStore, candidates, maxsim, ndcg_vector, qrels, query_vectors, rerank_run

KS = [10, 20, 30, 50, 100]
WEIGHTED = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
RRF = [0.3, 0.4, 0.5, 0.6, 0.7]


def minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return np.ones_like(x) if hi == lo else (x - lo) / (hi - lo)


def rank_of(x: np.ndarray) -> np.ndarray:
    order = np.argsort(-x, kind="stable")
    r = np.empty(len(x), dtype=np.int64)
    r[order] = np.arange(1, len(x) + 1)
    return r


def blended(fused: np.ndarray, new: np.ndarray, k: int, blend: str, w: float) -> np.ndarray:
    """What the gateway's rerank stage computes over the top k (docs/pipelines.md, "Rerankers")."""
    f, n = fused[:k], new[:k]
    if blend == "weighted":
        return (1 - w) * minmax(f) + w * minmax(n)
    return (1 - w) / (60 + rank_of(f)) + w / (60 + rank_of(n))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--splits", type=int, default=200, help="extra random splits for a held-out mean")
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    qids = sorted(qrels())
    cands = candidates()
    store = TokenStore(EXP / f"tokens_{args.tokens}.npz")
    pooled_npz = np.load(EXP / f"pooled_{args.tokens}.npz")
    pooled = dict(zip((str(i) for i in pooled_npz["ids"]), pooled_npz["vecs"]))
    qv = query_vectors()
    from gateway.embedding.bundled import BundledEmbedder
    embedder = BundledEmbedder(threads=2)
    qemb = dict(zip(qids, embedder.embed_documents([cands[q]["query"] for q in qids])))

    lists = {q: [r[0] for r in cands[q]["hybrid"]] for q in qids}
    fused = {q: np.array([r[1] for r in cands[q]["hybrid"]]) for q in qids}
    # The gateway's MaxSim: mean over query tokens without [CLS]/[SEP] of the best cosine with any
    # document token, documents without [CLS]/[SEP] (rerank.py); the ranking is that of the sum.
    ms = {q: maxsim(qv[q][1:-1], store, lists[q], "none") for q in qids}
    pool = {q: np.array([float(pooled[d] @ qemb[q]) for d in lists[q]]) for q in qids}

    base = ndcg_vector(rerank_run(lists, {q: np.zeros(1) for q in qids}, 0))
    table: dict[str, np.ndarray] = {"hybrid": base}
    for signal, values in (("lateInteraction", ms), ("pooled512", pool)):
        for k, (blend, w) in itertools.product(KS, [("weighted", w) for w in WEIGHTED] + [("rrf", w) for w in RRF]):
            scores = {q: blended(fused[q], values[q], k, blend, w) for q in qids}
            table[f"{signal} topK {k} {blend} {w}"] = ndcg_vector(rerank_run(lists, scores, k))
    index = {q: i for i, q in enumerate(qids)}

    def choose(half: list[str], prefix: str) -> str:
        rows = [index[q] for q in half]
        names = [n for n in table if n.startswith(prefix)]
        return max(names, key=lambda n: (round(float(table[n][rows].mean()), 6), -KS.index(int(n.split()[2]))))

    rng = np.random.default_rng(args.seed)
    order = list(rng.permutation(qids))
    halves = {"A": sorted(order[:150]), "B": sorted(order[150:])}
    report: dict = {"seed": args.seed, "all_queries": {"hybrid": float(base.mean())}, "folds": {}}
    for prefix in ("lateInteraction", "pooled512"):
        for train, test in (("A", "B"), ("B", "A")):
            chosen = choose(halves[train], prefix)
            test_rows = [index[q] for q in halves[test]]
            train_rows = [index[q] for q in halves[train]]
            report["folds"][f"{prefix}: choose on {train}, test on {test}"] = {
                "chosen": chosen, "train": float(table[chosen][train_rows].mean()),
                "test": float(table[chosen][test_rows].mean()),
                "hybrid_test": float(base[test_rows].mean()),
                "gain_test": float(table[chosen][test_rows].mean() - base[test_rows].mean())}
        held = []
        for _ in range(args.splits):
            perm = list(rng.permutation(qids))
            for a, b in ((perm[:150], perm[150:]), (perm[150:], perm[:150])):
                chosen = choose(a, prefix)
                held.append(float(table[chosen][[index[q] for q in b]].mean()))
        report[f"{prefix}: mean held-out nDCG@10 over {args.splits} random 2-fold splits"] = float(np.mean(held))
        best = max((n for n in table if n.startswith(prefix)), key=lambda n: table[n].mean())
        report["all_queries"][f"{prefix} best on all 300 (tuned on test, for reference only)"] = [
            best, float(table[best].mean())]
    for name in ("lateInteraction topK 50 weighted 0.6", "lateInteraction topK 30 weighted 0.3",
                 "lateInteraction topK 30 rrf 0.5", "lateInteraction topK 50 weighted 0.4"):
        report["all_queries"][name] = float(table[name].mean())
    (EXP / "cv.json").write_text(json.dumps({"report": report,
                                             "table": {n: float(v.mean()) for n, v in table.items()}}, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
