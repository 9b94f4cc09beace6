"""2-fold cross-validation of crossEncoder rerank settings on the SciFact test queries (issue 11).

Reads the hybrid top 100 per query (candidates.json) and the cross-encoder logits of its first K
(benchmarks/quality/cross_encoder_scores.py, one file per maxTokens). For every setting the
gateway's `crossEncoder` reranker can express over those scores — topK, blend `weighted` (weight
0.1-1.0) or `rrf` (0.3-0.9), maxTokens — it scores nDCG@10 per query, exactly as the rerank stage
blends (docs/pipelines.md, "Rerankers"). The 300 queries are split in two halves by the same seed
as benchmarks/quality/cv.py (11); each half chooses its best setting, which is then scored on the
other half. Ties go to the smaller topK, then the smaller maxTokens (cheaper). Nothing is chosen on
all 300 queries; their figures are printed for reference only.

  LI_WORKDIR=... SCIFACT_DIR=... PYTHONPATH=benchmarks/late_interaction:benchmarks/quality \
    python benchmarks/quality/cv_cross_encoder.py [--seed 11] [--splits 100] [--max-tokens 256 512]
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
from cv import blended
from mslib import EXP, candidates, ndcg_vector, paired, qrels, rerank_run

KS = [10, 20, 30, 50]
WEIGHTED = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
RRF = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def setting_key(name: str) -> tuple[int, int]:
    """(topK, maxTokens) of 'crossEncoder maxTokens M topK K blend w'."""
    parts = name.split()
    return int(parts[4]), int(parts[2])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--splits", type=int, default=100, help="extra random splits for a held-out mean")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[256, 512])
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
    index = {q: i for i, q in enumerate(qids)}

    def choose(half: list[str]) -> str:
        rows = [index[q] for q in half]
        return max(table, key=lambda n: (round(float(table[n][rows].mean()), 6),
                                         tuple(-v for v in setting_key(n))))

    rng = np.random.default_rng(args.seed)
    order = list(rng.permutation(qids))
    halves = {"A": sorted(order[:150]), "B": sorted(order[150:])}
    report: dict = {"seed": args.seed, "folds": {}}
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
