"""Per-query cost: query token vectors (BundledEmbedder.token_vectors vs embed_query) and MaxSim
over K precomputed docs (float16 store -> float32 compute), and a check that batched doc
vectors (padding + int8 dynamic quantisation per batch) match single-text token_vectors.
  SCIFACT_DIR=... python benchmarks/quality/timing.py   (run on a quiet machine)
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from mslib import EXP, TokenStore, candidates, qrels, queries

KS = [10, 20, 30, 50, 100]


def pct(xs, p):
    return round(float(np.percentile(xs, p)), 3)


def main() -> None:
    from gateway.embedding.bundled import BundledEmbedder

    out = {"load": os.getloadavg()}
    emb = BundledEmbedder()  # as the gateway builds it (a query runs on one thread)
    texts = [queries()[q] for q in sorted(qrels())]
    for t in texts[:10]:
        emb.token_vectors(t)
    for name, fn in (("token_vectors", emb.token_vectors), ("embed_query", emb.embed_query)):
        ts = []
        for t in texts:
            t0 = time.perf_counter()
            fn(t)
            ts.append((time.perf_counter() - t0) * 1000)
        out[f"{name}_ms"] = {"p50": pct(ts, 50), "p95": pct(ts, 95), "mean": round(float(np.mean(ts)), 3)}
    ntok = [len(emb._tokenizer.encode(t).ids) for t in texts]
    out["query_tokens_incl_cls_sep"] = {"mean": float(np.mean(ntok)), "p50": pct(ntok, 50), "p95": pct(ntok, 95)}

    # batched (stored) vs single-text vectors for 30 docs
    from precompute_tokens import index_texts

    ids, dtexts = index_texts()
    store = TokenStore(EXP / "tokens_256.npz")
    cos = []
    for i in range(0, len(ids), len(ids) // 30)[:30]:
        single = emb.token_vectors(dtexts[i])
        a, b = store.rows(ids[i], "none")
        stored = store.vecs[a:b].astype(np.float32)
        cos.append(float((single * stored).sum(1).mean()))
    out["batched_vs_single_token_cosine"] = {"mean": round(float(np.mean(cos)), 5), "min": round(float(np.min(cos)), 5)}

    # MaxSim cost
    cands = candidates()
    qids = sorted(qrels())
    qvecs = {q: emb.token_vectors(queries()[q]) for q in qids}
    for T in (256, 512):
        store = TokenStore(EXP / f"tokens_{T}.npz")
        for k in KS:
            ts, ts_gather = [], []
            for rep in range(2):
                for q in qids:
                    docs = [r[0] for r in cands[q]["hybrid"][:k]]
                    qv = qvecs[q]
                    t0 = time.perf_counter()
                    mat, starts = store.gather(docs, "none")
                    mat = mat.astype(np.float32)
                    t1 = time.perf_counter()
                    s = np.maximum.reduceat(qv @ mat.T, starts, axis=1).sum(0)
                    order = np.argsort(-s)
                    t2 = time.perf_counter()
                    if rep:
                        ts.append((t2 - t0) * 1000)
                        ts_gather.append((t1 - t0) * 1000)
            out[f"maxsim_ms T={T} K={k}"] = {"p50": pct(ts, 50), "p95": pct(ts, 95),
                                             "gather_f16_to_f32_p50": pct(ts_gather, 50)}
        del store
    out["load_after"] = os.getloadavg()
    (EXP / "timing.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
