"""Rocchio feedback on the dense query: q' = q + beta * mean(top-k hybrid documents' dense vectors),
re-search dense, fuse again with the same BM25 list. Run from the repository root:
  GATEWAY_MILVUS_URI=./data/scifact.db python benchmarks/late_interaction/dense_prf.py
"""
import asyncio
import os
from pathlib import Path

import numpy as np
from gateway.settings import Settings
from gateway.runtime import build_runtime
from gateway.retrieval.retrievers import CollectionRetriever, combine
from gateway.retrieval.defaults import options_for
from gateway.retrieval.options import Query
from gateway.retrieval.evaluation import load_qrels, load_queries, score, document_ranking

s = Settings(tenants_dir="docs/examples")
rt = build_runtime(s)
ref = rt.registry.resolve("scifact", "scifact", namespace="beir")
rt.store.open_existing(ref.scope)
DATA = Path(os.environ.get("SCIFACT_DIR", "../shared/data/scifact"))
qs = load_queries(DATA / "queries.jsonl")
qrels = load_qrels(DATA / "qrels/test.tsv")
qs = {k: v for k, v in qs.items() if k in qrels}
retr = CollectionRetriever(rt.store, rt.embedder, ref)
opts = options_for(ref.config, limit=100)
client = rt.store._client
name = ref.scope.chunk_collection

def vectors(ids):
    rows = client.get(collection_name=name, ids=ids, output_fields=["dense"])
    return {r["id"]: np.array(r["dense"], dtype=np.float32) for r in rows}

async def main():
    base = {}; lists = {}
    for qid, text in qs.items():
        q = rt.embedder.embed_query(text)
        sl = await retr.signal_lists(Query(text, q), opts)
        lists[qid] = (q, sl)
        base[qid] = document_ranking(combine(sl, opts))
    print("base", score(base, qrels))
    for k in (3, 5, 10):
        for beta in (0.3, 0.5, 1.0):
            run = {}
            for qid, text in qs.items():
                q, sl = lists[qid]
                top = combine(sl, opts)[:k]
                vs = vectors([h.id for h in top])
                centroid = np.mean([vs[h.id] for h in top if h.id in vs], axis=0)
                q2 = q + beta * centroid; q2 /= np.linalg.norm(q2)
                rows = await asyncio.to_thread(rt.store.search_dense, ref.scope, q2, opts.candidates, None)
                dense = retr._hits(rows, "dense", opts)
                from gateway.retrieval.fusion import best_per_source
                sl2 = {"dense": best_per_source(dense), "sparse": sl["sparse"]}
                run[qid] = document_ranking(combine(sl2, opts))
            print(k, beta, score(run, qrels), flush=True)

asyncio.run(main())
