"""2-fold cross-validation of crossEncoder rerank settings on the SciFact test queries (issue 11).

Reads the hybrid top 100 per query (candidates.json) and the cross-encoder logits of its first K
(benchmarks/quality/cross_encoder_scores.py, one file per maxTokens). For every setting the
gateway's `crossEncoder` reranker can express over those scores — topK, blend `weighted` (weight
0.1-1.0) or `rrf` (0.3-0.9), maxTokens — it scores nDCG@10 per query, exactly as the rerank stage
blends (docs/pipelines.md, "Rerankers"). The 300 queries are split in two halves by the same seed
as benchmarks/quality/cv.py (11); each half chooses its best setting, which is then scored on the
other half. Ties go to the smaller topK, then the smaller maxTokens (cheaper). Nothing is chosen on
all 300 queries; their figures are printed for reference only.

  LI_WORKDIR=... SCIFACT_DIR=...\
    python benchmarks/quality/cv_cross_encoder.py [--seed 11] [--splits 100] [--max-tokens 256 512]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
from cv import blended, minmax
from mslib import EXP, TokenStore, candidates, maxsim, ndcg_vector, paired, qrels, rerank_run

KS = [10, 20, 30, 50]
# The chain lateInteraction -> crossEncoder (--li-dir): both blended `weighted`.
CHAIN_KS = [10, 20, 30, 50]
CHAIN_W1 = [0.4, 0.5, 0.6, 0.7]
CHAIN_W2 = [0.2, 0.3, 0.4, 0.5, 0.6]
WEIGHTED = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
RRF = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def setting_key(name: str) -> tuple[int, int]:
    """(topK, maxTokens) of 'crossEncoder maxTokens M topK K blend w' (or of its chain's cross-encoder)."""
    parts = name.split("-> ")[-1].split()
    return int(parts[4]), int(parts[2])


def chain(fused: np.ndarray, li: np.ndarray, ce: np.ndarray, a: int, w1: float, b: int, w2: float
          ) -> tuple[list[int], np.ndarray]:
    """What RerankStage does for [lateInteraction(topK a, weighted w1), crossEncoder(topK b, weighted w2)]:
    the indices (into the hybrid list) of the final order's first b, and their final scores."""
    first = (1 - w1) * minmax(fused[:a]) + w1 * minmax(li[:a])
    top = list(np.argsort(-first, kind="stable")[:b])
    second = (1 - w2) * minmax(first[top]) + w2 * minmax(ce[top])
    return top, second


def chain_run(lists: dict, fused: dict, li: dict, ce: dict, a: int, w1: float, b: int, w2: float) -> dict:
    run = {}
    for q, ids in lists.items():
        top, second = chain(fused[q], li[q], ce[q], a, w1, b, w2)
        ranked = [ids[top[i]] for i in np.argsort(-second, kind="stable")]
        run[q] = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--splits", type=int, default=100, help="extra random splits for a held-out mean")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--tolerance", type=float, default=0.0,
                        help="choose the cheapest setting (smallest crossEncoder topK, then maxTokens) within "
                             "this much nDCG@10 of the best on the choosing half")
    parser.add_argument("--li-dir", help="a folder with tokens_512.npz and qvecs.npz (benchmarks/quality/"
                                         "precompute.py): adds the lateInteraction -> crossEncoder chain")
    args = parser.parse_args()
    qids = sorted(qrels())
    cands = candidates()
    lists = {q: [r[0] for r in cands[q]["hybrid"]] for q in qids}
    fused = {q: np.array([r[1] for r in cands[q]["hybrid"]]) for q in qids}
    base = ndcg_vector(rerank_run(lists, {q: np.zeros(1) for q in qids}, 0))
    table: dict[str, np.ndarray] = {}
    for tokens in args.max_tokens:
        logits = json.loads((EXP / f"ce_{tokens}.json").read_text())
        depth = min(len(logits[q]) for q in qids)
        for k, (blend, w) in itertools.product([k for k in KS if k <= depth],
                                               [("weighted", w) for w in WEIGHTED] + [("rrf", w) for w in RRF]):
            scores = {q: blended(fused[q], np.array(logits[q][:k]), k, blend, w) for q in qids}
            table[f"crossEncoder maxTokens {tokens} topK {k} {blend} {w}"] = ndcg_vector(rerank_run(lists, scores, k))
    if args.li_dir:
        # MaxSim as the gateway computes it: mean over query tokens without [CLS]/[SEP].
        depth = max(CHAIN_KS)
        cached = EXP / f"li_{depth}.json"
        if not cached.exists():
            store = TokenStore(Path(args.li_dir) / "tokens_512.npz")
            qv = np.load(Path(args.li_dir) / "qvecs.npz")
            cached.write_text(json.dumps({q: maxsim(qv[q][1:-1], store, lists[q][:depth], "none",
                                                    reduce="mean").tolist() for q in qids}))
        li = {q: np.array(v) for q, v in json.loads(cached.read_text()).items()}
        tokens = args.max_tokens[0]
        logits = json.loads((EXP / f"ce_{tokens}.json").read_text())
        ce = {q: np.array(logits[q][:depth]) for q in qids}
        for a, w1, b, w2 in itertools.product(CHAIN_KS, CHAIN_W1, KS, CHAIN_W2):
            if b <= a and a <= min(len(v) for v in ce.values()):
                table[f"lateInteraction topK {a} weighted {w1} -> crossEncoder maxTokens {tokens} topK {b} "
                      f"weighted {w2}"] = ndcg_vector(chain_run(lists, fused, li, ce, a, w1, b, w2))
    index = {q: i for i, q in enumerate(qids)}

    def choose(half: list[str]) -> str:
        """The best setting on `half`; with --tolerance, the cheapest within that much of it."""
        rows = [index[q] for q in half]
        means = {n: round(float(table[n][rows].mean()), 6) for n in table}
        top = max(means.values())
        return max((n for n in table if means[n] >= top - args.tolerance),
                   key=lambda n: (tuple(-v for v in setting_key(n)), means[n]) if args.tolerance
                   else (means[n], tuple(-v for v in setting_key(n))))

    rng = np.random.default_rng(args.seed)
    order = list(rng.permutation(qids))
    halves = {"A": sorted(order[:150]), "B": sorted(order[150:])}
    report: dict = {"seed": args.seed, "tolerance": args.tolerance, "folds": {}}
    for train, test in (("A", "B"), ("B", "A")):
        chosen = choose(halves[train])
        test_rows = [index[q] for q in halves[test]]
        train_rows = [index[q] for q in halves[train]]
        report["folds"][f"choose on {train}, test on {test}"] = {
            "chosen": chosen, "train": float(table[chosen][train_rows].mean()),
            "test": float(table[chosen][test_rows].mean()), "hybrid_test": float(base[test_rows].mean()),
            "gain_test": float(table[chosen][test_rows].mean() - base[test_rows].mean())}
    held, gains = [], []
    for _ in range(args.splits):
        perm = list(rng.permutation(qids))
        for a, b in ((perm[:150], perm[150:]), (perm[150:], perm[:150])):
            rows = [index[q] for q in b]
            chosen = choose(a)
            held.append(float(table[chosen][rows].mean()))
            gains.append(float(table[chosen][rows].mean() - base[rows].mean()))
    report[f"mean held-out nDCG@10 over {args.splits} random 2-fold splits"] = float(np.mean(held))
    report["held-out gain over hybrid: mean, share of folds with a gain"] = [float(np.mean(gains)),
                                                                           float(np.mean(np.array(gains) > 0))]
    best = max(table, key=lambda n: table[n].mean())
    report["all 300 queries (for reference only, never used to choose)"] = {
        "hybrid": float(base.mean()), "best cell": [best, float(table[best].mean())],
        **{name: float(table[name].mean()) for name in sorted({f["chosen"] for f in report["folds"].values()})}}
    for name in sorted({f["chosen"] for f in report["folds"].values()}):
        report[f"paired vs hybrid on all 300: {name}"] = paired(base, table[name])
    (EXP / "cv_cross_encoder.json").write_text(json.dumps(
        {"report": report, "table": {n: float(v.mean()) for n, v in table.items()}}, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
