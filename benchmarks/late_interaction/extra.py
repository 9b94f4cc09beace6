"""Step 5 extras over cached features: IDF-weighted query tokens in MaxSim, and a
cross-validated estimate for the min-max (fused, MaxSim) recipe family.
  OMP_NUM_THREADS=1 python benchmarks/late_interaction/extra.py
"""

from __future__ import annotations

import itertools
import json

import numpy as np

import features as F
from mslib import EXP, minmax, ndcg_vector, paired, qrels, rerank_run, score

KS = [10, 20, 30, 50, 100]
WS = [0.3, 0.4, 0.5, 0.6, 0.7]


def wordpiece_idf() -> np.ndarray:
    from tokenizers import Tokenizer

    from gateway.embedding.bundled import model_files
    from precompute_tokens import index_texts

    tok = Tokenizer.from_file(str(model_files()[1]))
    tok.no_truncation()
    tok.no_padding()
    _, texts = index_texts()
    df = np.zeros(tok.get_vocab_size(), dtype=np.int64)
    for e in tok.encode_batch(texts):
        df[np.unique(e.ids)] += 1
    n = len(texts)
    return np.log(1 + (n - df + 0.5) / (df + 0.5))


def main() -> None:
    idf = wordpiece_idf()
    qids = sorted(qrels())
    out = {}
    vecs = {}
    for T in (256, 512):
        feats = F.load(T)
        hybrid = {q: feats[q]["ids"] for q in qids}
        base = ndcg_vector(rerank_run(hybrid, {q: np.zeros(1) for q in qids}, 0))

        def ms(f, mode):
            m = f["msmat"]["none"][1:-1]          # query tokens without [CLS]/[SEP], docs without
            ids = np.array(f["qids_tok"][1:-1])
            if mode == "sum":
                return m.sum(0)
            if mode == "idf":
                return (idf[ids][:, None] * m).sum(0)
            if mode == "idf>1":  # drop very common pieces (the, of, punctuation), unweighted
                keep = idf[ids] > 1.0
                return m[keep].sum(0) if keep.any() else m.sum(0)
            raise ValueError(mode)

        for mode in ("sum", "idf", "idf>1"):
            cache = {q: ms(feats[q], mode) for q in qids}
            for k in KS:
                name = f"T={T} maxsim[{mode}] alone K={k}"
                run = rerank_run(hybrid, {q: cache[q][:k] for q in qids}, k)
                out[name] = score(run)["ndcg@10"]
                for w in WS:
                    name = f"T={T} mm(fused, maxsim[{mode}]) w={w} K={k}"
                    new = {q: w * minmax(cache[q][:k]) + (1 - w) * minmax(feats[q]["fused"][:k]) for q in qids}
                    run = rerank_run(hybrid, new, k)
                    out[name] = score(run)["ndcg@10"]
                    vecs[name] = ndcg_vector(run)
        vecs[f"T={T} base"] = base

    # print grids
    for T, mode in itertools.product((256, 512), ("sum", "idf", "idf>1")):
        print(f"-- T={T} maxsim[{mode}]: alone | mm w=" + " ".join(map(str, WS)))
        for k in KS:
            row = " ".join(f"{out[f'T={T} mm(fused, maxsim[{mode}]) w={w} K={k}']:.4f}" for w in WS)
            print(f"  K={k:3d}  {out[f'T={T} maxsim[{mode}] alone K={k}']:.4f} | {row}")

    # cross-validation of the family (K, w) per T/mode: 2-fold, 200 random splits
    rng = np.random.default_rng(0)
    print("-- 2-fold CV (choose K,w on one half, test on the other; 200 splits); mean held-out nDCG@10")
    for T, mode in itertools.product((256, 512), ("sum", "idf")):
        names = [f"T={T} mm(fused, maxsim[{mode}]) w={w} K={k}" for k in KS for w in WS]
        M = np.stack([vecs[n] for n in names])
        base = vecs[f"T={T} base"]
        held, held_base, picks = [], [], {}
        for _ in range(200):
            perm = rng.permutation(len(qids))
            a, b = perm[:150], perm[150:]
            for tr, te in ((a, b), (b, a)):
                best = int(np.argmax(M[:, tr].mean(1)))
                picks[names[best]] = picks.get(names[best], 0) + 1
                held.append(M[best, te].mean())
                held_base.append(base[te].mean())
        top = sorted(picks.items(), key=lambda kv: -kv[1])[:3]
        print(f"  T={T} {mode}: held-out {np.mean(held):.4f} vs hybrid {np.mean(held_base):.4f} "
              f"(+{np.mean(held) - np.mean(held_base):.4f}); most picked {top}")

    (EXP / "extra_results.json").write_text(json.dumps(out, indent=0))
    best = max((n for n in vecs if "base" not in n), key=lambda n: vecs[n].mean())
    print("best", best, round(float(vecs[best].mean()), 4), paired(vecs["T=512 base"], vecs[best]))


if __name__ == "__main__":
    main()
