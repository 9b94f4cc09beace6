"""Federated search over collections whose settings differ, each searched in its own mode.

`gateway eval --collections` applies one --mode to every collection; this runs the search path
with no mode in the request, so each collection keeps the mode, fusion and alpha of the tenant
file (for instance one BM25-only shard among hybrid ones), and reports nDCG@10 per merge.

  GATEWAY_TENANTS_DIR=<dir with a variant of scifact-split> GATEWAY_MILVUS_URI=./data/scifact-split.db \
    python benchmarks/quality/federated_mixed.py --queries $SCIFACT/queries.jsonl \
      --qrels $SCIFACT/qrels/test.tsv [--merge signals,rrf] [--limit 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from gateway.retrieval.evaluation import evaluate, load_qrels, load_queries
from gateway.retrieval.options import Mode, SearchOptions
from gateway.routing.searcher import SearchRequest, Searcher
from gateway.runtime import build_runtime
from gateway.settings import Settings
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role
from gateway.tenancy.registry import TenantRegistry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="scifact-split")
    parser.add_argument("--namespace", default="beir")
    parser.add_argument("--queries", required=True, type=Path)
    parser.add_argument("--qrels", required=True, type=Path)
    parser.add_argument("--merge", default="signals,rrf")
    parser.add_argument("--limit", type=int, default=10)
    args = parser.parse_args()
    queries, qrels = load_queries(args.queries), load_qrels(args.qrels)
    runtime = build_runtime(Settings())
    results = {}
    try:
        base = runtime.registry.get(args.tenant)
        refs = runtime.registry.collections(args.tenant, args.namespace)
        labels = tuple(r.label for r in refs)
        for merge in args.merge.split(","):
            tenant = base.model_copy(update={"federation": base.federation.model_copy(update={"merge": merge})})
            searcher = Searcher(TenantRegistry({tenant.id: tenant}), runtime.store, runtime.embedder,
                                runtime.settings, tokens=runtime.tokens)
            principal = Principal(tenant.id, Role.READER)

            class Federated:
                async def retrieve(self, query, options, searcher=searcher, principal=principal):
                    request = SearchRequest(query=query.text, collections=labels, limit=args.limit)
                    return list((await searcher.search(principal, request)).hits)

            result = asyncio.run(evaluate(Federated(), SearchOptions(mode=Mode.HYBRID, limit=args.limit),
                                          queries, qrels))
            results[merge] = {**result.metrics, "p50_ms": result.latency_ms_p50}
        results["collections"] = {r.label: {"mode": r.config.mode.value, "fusion": r.config.fusion.value,
                                            "alpha": r.config.alpha} for r in refs}
    finally:
        runtime.close()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
