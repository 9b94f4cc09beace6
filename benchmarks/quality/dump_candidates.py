"""Dump, once per SciFact test query, the gateway's own candidate lists to candidates.json.

Run from the repository root:
  GATEWAY_TENANTS_DIR=docs/examples GATEWAY_MILVUS_URI=./data/scifact.db \
    python benchmarks/quality/dump_candidates.py

Per query: the hybrid top-100 (collection defaults: weighted, alpha 0.5, 200 candidates/signal,
one hit per source) with each signal's raw score and rank from hit.provenance.scores; the
dense-only top-100; and the full per-signal lists (200 each) before fusion.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from gateway.retrieval.defaults import options_for
from gateway.retrieval.evaluation import RANK_DEPTH, load_qrels, load_queries, score
from gateway.retrieval.options import Mode, Query
from gateway.retrieval.retrievers import CollectionRetriever, combine
from gateway.runtime import build_runtime
from gateway.settings import Settings
from mslib import EXP, scifact_dir

OUT = EXP / "candidates.json"


def signals(hit) -> dict:
    return {s.signal: (s.raw, s.rank) for s in hit.provenance.scores}


async def main() -> None:
    queries = load_queries(scifact_dir() / "queries.jsonl")
    qrels = load_qrels(scifact_dir() / "qrels/test.tsv")
    runtime = build_runtime(Settings())
    try:
        ref = runtime.registry.resolve("scifact", "scifact", namespace="beir")
        assert runtime.store.open_existing(ref.scope), "collection not ingested"
        retriever = CollectionRetriever(runtime.store, runtime.embedder, ref)
        hybrid_opts = options_for(ref.config, mode=Mode.HYBRID, limit=RANK_DEPTH)
        dense_opts = options_for(ref.config, mode=Mode.DENSE, limit=RANK_DEPTH)
        print("options:", hybrid_opts, file=sys.stderr)
        out, lat = {}, []
        for qid in qrels:
            text = queries[qid]
            t0 = time.perf_counter()
            lists = await retriever.signal_lists(Query(text), hybrid_opts)
            hybrid = combine(lists, hybrid_opts)
            lat.append(time.perf_counter() - t0)
            dense_only = combine({"dense": lists["dense"]}, dense_opts)
            rows = []
            for h in hybrid:
                s = signals(h)
                d = s.get("dense", (None, None))
                sp = s.get("sparse", (None, None))
                rows.append([h.source_id, h.score, d[0], d[1], sp[0], sp[1]])
            out[qid] = {
                "query": text,
                "hybrid": rows,  # [source_id, fused, dense_raw, dense_rank, sparse_raw, sparse_rank]
                "dense": [[h.source_id, h.score] for h in dense_only],
                "dense_all": [[h.source_id, h.score] for h in lists["dense"]],
                "sparse_all": [[h.source_id, h.score] for h in lists["sparse"]],
            }
        meta = {"options": {k: str(getattr(hybrid_opts, k)) for k in
                            ("mode", "limit", "fusion", "alpha", "rrf_k", "candidates", "group_by_source")},
                "retrieve_ms_p50": sorted(lat)[len(lat) // 2] * 1000}
        OUT.write_text(json.dumps({"meta": meta, "queries": out}))
        # Sanity: the gateway's own scorer on what we dumped.
        for name in ("hybrid", "dense"):
            run = {q: {r[0]: float(len(v[name]) - i) for i, r in enumerate(v[name])} for q, v in out.items()}
            print(name, score(run, qrels), file=sys.stderr)
        print(json.dumps(meta), file=sys.stderr)
    finally:
        runtime.close()


if __name__ == "__main__":
    asyncio.run(main())
