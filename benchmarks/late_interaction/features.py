"""Per-query feature arrays for the hybrid top-100 and dense top-100 (cached to features_<T>.pkl).

For each test query: candidate ids; fused score; dense cosine and BM25 raw (imputed with the
200-list minimum when a doc is missing from that signal's list); global dense/sparse ranks
(None -> 10**6); MaxSim (sum over query tokens) for every [CLS]/[SEP] variant.
  python benchmarks/late_interaction/features.py [--tokens 256]
"""

from __future__ import annotations

import argparse
import pickle

import numpy as np

from mslib import EXP, TokenStore, candidates, maxsim_matrix, query_token_ids, query_vectors

VARIANTS = [("none", "none"), ("both", "none"), ("none", "both"), ("both", "both"), ("cls", "cls")]


def build(tokens: int) -> dict:
    cands = candidates()
    store = TokenStore(EXP / f"tokens_{tokens}.npz")
    qv = query_vectors()
    qtok = query_token_ids()
    feats = {}
    for qid, c in cands.items():
        dense_all = {d: s for d, s in c["dense_all"]}
        sparse_all = {d: s for d, s in c["sparse_all"]}
        dmin = min(dense_all.values())
        smin = min(sparse_all.values()) if sparse_all else 0.0
        h = c["hybrid"]
        ids = [r[0] for r in h]
        f = {
            "ids": ids,
            "fused": np.array([r[1] for r in h]),
            "dense": np.array([dense_all.get(d, dmin) for d in ids]),
            "sparse": np.array([sparse_all.get(d, smin) for d in ids]),
            "drank": np.array([r[3] if r[3] is not None else 10**6 for r in h]),
            "srank": np.array([r[5] if r[5] is not None else 10**6 for r in h]),
            "dense_ids": [r[0] for r in c["dense"]],
            "dense_scores": np.array([r[1] for r in c["dense"]]),
            "sparse_ids": [r[0] for r in c["sparse_all"][:100]],
            "nq": {},
            "ms": {}, "ms_dense": {},
        }
        # Per query token (all of them, [CLS] first, [SEP] last) x candidate: max cosine.
        f["qids_tok"] = qtok[qid]
        f["msmat"], f["msmat_dense"] = {}, {}
        for ds in ("none", "both", "cls"):
            f["msmat"][ds] = maxsim_matrix(qv[qid], store, ids, ds)
            f["msmat_dense"][ds] = maxsim_matrix(qv[qid], store, f["dense_ids"], ds)
        for qs, ds in VARIANTS:
            rows = slice(1, -1) if qs == "none" else slice(0, -1) if qs == "cls" else slice(None)
            f["nq"][qs] = len(qv[qid][rows])
            f["ms"][(qs, ds)] = f["msmat"][ds][rows].sum(0)
            f["ms_dense"][(qs, ds)] = f["msmat_dense"][ds][rows].sum(0)
        feats[qid] = f
    return feats


def load(tokens: int = 256) -> dict:
    path = EXP / f"features_{tokens}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    feats = build(tokens)
    path.write_bytes(pickle.dumps(feats))
    return feats


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=256)
    a = p.parse_args()
    f = load(a.tokens)
    print(len(f), "queries")
