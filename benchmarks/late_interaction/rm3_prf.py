"""RM3-style pseudo-relevance feedback for the BM25 side, then the gateway's weighted fusion
(min-max per 200-list, alpha 0.5) with the dumped dense list, then optional MaxSim rerank.
BM25 here is offline (bm25.py), so compare against the offline no-PRF row, not only 0.7318.
  OMP_NUM_THREADS=1 python benchmarks/late_interaction/rm3_prf.py
"""

from __future__ import annotations

import itertools
import json

import numpy as np

from bm25 import corpus_bm25
from mslib import EXP, TokenStore, candidates, minmax, ndcg_vector, paired, qrels, query_vectors, rerank_run, score, maxsim

DEPTH = 200


def weighted_fusion(dense: list, sparse: list, alpha: float = 0.5) -> list[tuple[str, float]]:
    tot: dict[str, float] = {}
    for lst, w in ((dense, alpha), (sparse, 1 - alpha)):
        if not lst:
            continue
        s = minmax(np.array([x[1] for x in lst], dtype=np.float64))
        for (d, _), v in zip(lst, s):
            tot[d] = tot.get(d, 0.0) + w * v
    return sorted(tot.items(), key=lambda kv: (-kv[1], kv[0]))


def main() -> None:
    bm = corpus_bm25()
    cands = candidates()
    qids = sorted(qrels())
    store = TokenStore(EXP / "tokens_512.npz")
    qv = query_vectors()
    results, vecs = {}, {}

    def evaluate(name: str, fused: dict[str, list]) -> None:
        lists = {q: [d for d, _ in fused[q][:100]] for q in qids}
        run = rerank_run(lists, {q: np.zeros(1) for q in qids}, 0)
        results[name] = {k: round(v, 4) for k, v in score(run).items()}
        vecs[name] = ndcg_vector(run)
        # + MaxSim (512 tokens, no [CLS]/[SEP]) min-max fused with the fused score, K=50, w=0.6
        for k, w in ((30, 0.5), (50, 0.6), (100, 0.6)):
            new = {}
            for q in qids:
                top = fused[q][:k]
                ms = maxsim(qv[q][1:-1], store, [d for d, _ in top], "none")
                new[q] = w * minmax(ms) + (1 - w) * minmax(np.array([s for _, s in top]))
            run = rerank_run(lists, new, k)
            n2 = f"{name} + mm(maxsim512) w={w} K={k}"
            results[n2] = {kk: round(v, 4) for kk, v in score(run).items()}
            vecs[n2] = ndcg_vector(run)
        print(f"{results[name]['ndcg@10']:.4f} R@100 {results[name]['recall@100']:.4f}  {name}   "
              + "  ".join(f"{results[n]['ndcg@10']:.4f}" for n in results if n.startswith(name + " +")), flush=True)

    # baselines: the gateway's dump, and the same fusion with offline BM25
    evaluate("gateway hybrid (dump)", {q: [(r[0], r[1]) for r in cands[q]["hybrid"]] for q in qids})
    sparse0 = {q: bm.top(bm.query_weights(cands[q]["query"]), DEPTH) for q in qids}
    dense = {q: [tuple(x) for x in cands[q]["dense_all"]] for q in qids}
    evaluate("offline hybrid (no PRF)", {q: weighted_fusion(dense[q], sparse0[q]) for q in qids})
    run = rerank_run({q: [d for d, _ in sparse0[q][:100]] for q in qids}, {q: np.zeros(1) for q in qids}, 0)
    print("offline BM25 alone", score(run))

    for source, fb, terms, ow in itertools.product(("hybrid", "bm25"), (3, 5), (10, 20, 40), (0.5, 0.7)):
        fused, sparse_only = {}, {}
        for q in qids:
            text = cands[q]["query"]
            if source == "hybrid":
                feedback = [(r[0], r[1]) for r in cands[q]["hybrid"][:fb]]
            else:
                feedback = sparse0[q][:fb]
            weights = bm.rm3(text, feedback, terms, ow)
            sp = bm.top(weights, DEPTH)
            sparse_only[q] = [d for d, _ in sp[:100]]
            fused[q] = weighted_fusion(dense[q], sp)
        r = score(rerank_run(sparse_only, {q: np.zeros(1) for q in qids}, 0))
        print(f"   RM3 BM25 alone fb={source}:{fb} terms={terms} orig={ow}: {r['ndcg@10']:.4f} R@100 {r['recall@100']:.4f}")
        evaluate(f"hybrid(RM3 fb={source}:{fb} terms={terms} orig={ow})", fused)

    (EXP / "prf_results.json").write_text(json.dumps(results, indent=0))
    base = vecs["gateway hybrid (dump)"]
    for n in sorted(results, key=lambda n: -results[n]["ndcg@10"])[:8]:
        print(f"{results[n]['ndcg@10']:.4f}  {n}  {paired(base, vecs[n], trials=5000)}")


if __name__ == "__main__":
    main()
