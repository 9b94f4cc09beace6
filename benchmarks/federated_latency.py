"""Federated search over N collections vs one collection holding the same documents, one run.

Queries alternate between the two paths; the query-embedding cache is off so neither profits
from the other. Both go through Searcher.search (routing, federation, trace), as GraphQL does.

    GATEWAY_TENANTS_DIR=docs/examples python benchmarks/federated_latency.py \
        --single-uri ./data/scifact.db --split-uri ./data/scifact-split.db \
        --queries $SCIFACT/queries.jsonl --count 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from gateway.embedding.factory import build_embedder
from gateway.retrieval.evaluation import load_queries
from gateway.routing.searcher import SearchRequest, Searcher
from gateway.settings import Settings
from gateway.storage.milvus import MilvusStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role
from gateway.tenancy.loader import load_tenants
from gateway.tenancy.registry import TenantRegistry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single-uri", required=True)
    parser.add_argument("--split-uri", required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--merge", choices=["rrf", "dbsf", "signals"])
    args = parser.parse_args()
    settings = Settings(query_cache_size=0)
    tenants = load_tenants(settings.tenants_dir)
    if args.merge:
        split = tenants["scifact-split"]
        tenants["scifact-split"] = split.model_copy(
            update={"federation": split.federation.model_copy(update={"merge": args.merge})})
    registry = TenantRegistry(tenants)
    embedder = build_embedder(settings)
    single_store, split_store = MilvusStore(args.single_uri), MilvusStore(args.split_uri)
    single = Searcher(registry, single_store, embedder, settings)
    split = Searcher(registry, split_store, embedder, settings)
    texts = list(load_queries(args.queries).values())[:args.count]
    parts = tuple(ref.label for ref in registry.collections("scifact-split"))

    async def one(searcher: Searcher, tenant: str, request: SearchRequest) -> float:
        started = time.perf_counter()
        await searcher.search(Principal(tenant, Role.READER), request)
        return (time.perf_counter() - started) * 1000

    async def run() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"single": [], "federated": []}
        for i, text in enumerate(texts[:20] + texts):
            a = ("single", one(single, "scifact", SearchRequest(query=text, collection="scifact")))
            b = ("federated", one(split, "scifact-split", SearchRequest(query=text, collections=parts)))
            for name, task in ((a, b) if i % 2 else (b, a)):
                elapsed = await task
                if i >= 20:  # the first 20 warm up model and caches
                    times[name].append(elapsed)
        return times

    times = asyncio.run(run())
    base = statistics.median(times["single"])
    print(json.dumps({name: {"n": len(v), "p50_ms": round(statistics.median(v), 2),
                             "p95_ms": round(sorted(v)[int(0.95 * (len(v) - 1))], 2),
                             "p50_ratio": round(statistics.median(v) / base, 3)} for name, v in times.items()}, indent=2))
    single_store.close()
    split_store.close()


if __name__ == "__main__":
    main()
