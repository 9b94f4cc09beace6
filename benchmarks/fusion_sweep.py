"""Sweep hybrid fusion settings on a BEIR collection: each signal is searched once per query,
then every (fusion, alpha, depth) setting is fused offline with the gateway's own fusion code.

    GATEWAY_TENANTS_DIR=docs/examples python benchmarks/fusion_sweep.py \
        --tenant scifact --namespace beir --collection scifact \
        --queries $SCIFACT/queries.jsonl --qrels $SCIFACT/qrels/test.tsv
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from gateway.retrieval.evaluation import document_ranking, load_qrels, load_queries, score
from gateway.retrieval.fusion import alpha_weights, best_per_source, chunk_key, fuse, source_key
from gateway.retrieval.options import Fusion, Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.runtime import build_runtime
from gateway.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("tenant", "namespace", "collection"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--qrels", type=Path, required=True)
    parser.add_argument("--depth", type=int, default=300)
    args = parser.parse_args()
    runtime = build_runtime(Settings())
    ref = runtime.registry.resolve(args.tenant, args.collection, namespace=args.namespace)
    runtime.store.open_existing(ref.scope)
    retriever = CollectionRetriever(runtime.store, runtime.embedder, ref)
    queries, qrels = load_queries(args.queries), load_qrels(args.qrels)
    judged = {q: r for q, r in qrels.items() if q in queries}
    lists = {}
    for qid in judged:
        query = Query(queries[qid])
        dense = asyncio.run(retriever.retrieve(query, SearchOptions(Mode.DENSE, args.depth, candidates=args.depth)))
        sparse = asyncio.run(retriever.retrieve(query, SearchOptions(Mode.SPARSE, args.depth, candidates=args.depth)))
        lists[qid] = (dense, sparse)
    rows = []
    settings = [(grouped, depth, fusion, alpha, k)
                for grouped in (False, True) for depth in (50, 100, 200, 300) for fusion in Fusion
                for alpha in (None, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
                for k in ((10, 20, 40, 60, 100) if fusion is Fusion.RRF else (60,))
                if not (fusion is Fusion.WEIGHTED and alpha is None)]
    for grouped, depth, fusion, alpha, k in settings:
        prep = best_per_source if grouped else list
        key = source_key if grouped else chunk_key
        run = {q: document_ranking(fuse(fusion, [prep(d[:depth]), prep(s[:depth])], alpha_weights(alpha),
                                        k=k, key=key))
               for q, (d, s) in lists.items()}
        rows.append({"fusion": fusion.value, "alpha": alpha, "candidates": depth, "k": k,
                     "per_source": grouped, **score(run, judged)})
    rows.sort(key=lambda r: -r["ndcg@10"])
    for row in rows:
        print(json.dumps(row))
    runtime.close()


if __name__ == "__main__":
    main()
