"""Fusion inside Milvus (hybrid_search with RRFRanker / WeightedRanker) vs in the gateway.

Same collection, queries, depth and boundary filter; chunk hits collapsed to documents the same
way. Reports nDCG@10 / Recall@100 and p50 latency for each.

    GATEWAY_TENANTS_DIR=docs/examples GATEWAY_MILVUS_URI=./data/scifact.db python benchmarks/milvus_fusion.py \
        --queries $SCIFACT/queries.jsonl --qrels $SCIFACT/qrels/test.tsv
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from pymilvus import AnnSearchRequest, RRFRanker, WeightedRanker

from gateway.retrieval.evaluation import document_ranking, load_qrels, load_queries, score
from gateway.retrieval.hit import Hit, Provenance
from gateway.retrieval.options import Fusion, Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.runtime import build_runtime
from gateway.settings import Settings
from gateway.storage.schema import CHUNK_OUTPUT_FIELDS

DEPTH = 300


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--qrels", type=Path, required=True)
    args = parser.parse_args()
    runtime = build_runtime(Settings())
    ref = runtime.registry.resolve("scifact", "scifact", namespace="beir")
    store = runtime.store
    store.open_existing(ref.scope)
    queries, qrels = load_queries(args.queries), load_qrels(args.qrels)
    judged = {q: r for q, r in qrels.items() if q in queries}
    boundary = store._boundary(ref.scope, None)
    retriever = CollectionRetriever(store, runtime.embedder, ref)

    def in_milvus(text: str, ranker) -> list[Hit]:
        vector = runtime.embedder.embed_query(text).tolist()
        requests = [AnnSearchRequest(data=[vector], anns_field="dense", param={"metric_type": "COSINE"},
                                     limit=DEPTH, expr=boundary),
                    AnnSearchRequest(data=[store.analyzer.analyse(text)], anns_field="sparse",
                                     param={"metric_type": "BM25"}, limit=DEPTH, expr=boundary)]
        result = store._client.hybrid_search(ref.scope.chunk_collection, requests, ranker=ranker, limit=DEPTH,
                                             output_fields=CHUNK_OUTPUT_FIELDS)
        provenance = Provenance("scifact", "beir", "scifact", "third-party", "milvus", "hybrid")
        return [Hit("beir", "scifact", h["entity"]["source_id"], h["entity"]["chunk_id"], "", float(h["distance"]),
                    provenance) for h in result[0]]

    def in_gateway(text: str, fusion: Fusion, alpha: float | None) -> list[Hit]:
        options = SearchOptions(mode=Mode.HYBRID, limit=DEPTH, candidates=DEPTH, fusion=fusion, alpha=alpha)
        return asyncio.run(retriever.retrieve(Query(text), options))

    variants = {
        "milvus rrf k=60": lambda t: in_milvus(t, RRFRanker(60)),
        "gateway rrf k=60": lambda t: in_gateway(t, Fusion.RRF, None),
        "milvus weighted 0.4/0.6": lambda t: in_milvus(t, WeightedRanker(0.4, 0.6)),
        "gateway weighted alpha=0.4": lambda t: in_gateway(t, Fusion.WEIGHTED, 0.4),
    }
    for text in list(queries.values())[:10]:
        for run in variants.values():
            run(text)
    report = {}
    for name, run in variants.items():
        ranking, latencies = {}, []
        for qid in judged:
            started = time.perf_counter()
            hits = run(queries[qid])
            latencies.append((time.perf_counter() - started) * 1000)
            ranking[qid] = document_ranking(hits)
        report[name] = {**score(ranking, judged), "p50_ms": round(statistics.median(latencies), 2)}
    print(json.dumps(report, indent=2))
    runtime.close()


if __name__ == "__main__":
    main()
