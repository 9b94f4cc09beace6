"""GraphQL-over-HTTP latency vs the same retrieval called directly in Python, in one run.

Each query runs once directly (Searcher.search) and once through POST /graphql on a uvicorn
server on loopback, alternating which goes first, with the query-embedding cache off so neither
path profits from the other. Reports p50/p95 per path and their ratio.

    GATEWAY_TENANTS_DIR=docs/examples GATEWAY_MILVUS_URI=./data/scifact.db \
      python benchmarks/graphql_latency.py --tenant scifact --collection scifact \
        --queries $SCIFACT/queries.jsonl --count 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from gateway.app import create_app
from gateway.retrieval.evaluation import load_queries
from gateway.routing.searcher import SearchRequest, Searcher
from gateway.runtime import build_runtime
from gateway.settings import Settings
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role

BARE = """query($q: String!, $c: String!) { search(input: {query: $q, collection: $c}) {
  hits { chunk { id sourceId chunkId title metadata } content score
         provenance { tenant collection trustTier mode scores { signal raw rank } fusedScore contentHash } }
  trace { traceId durationMs stages { name status durationMs outputCount } } } }"""
WITH_PARENT = BARE.replace("title metadata", "title metadata parent { key content }")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--collection", required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
    key = os.environ.setdefault("SCIFACT_API_KEY", "benchmark-key")
    settings = Settings(query_cache_size=0, ingest_demo_on_start=False)
    texts = list(load_queries(args.queries).values())[:args.count]

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.1)

    runtime = build_runtime(settings)
    searcher = Searcher(runtime.registry, runtime.store, runtime.embedder, settings)
    principal = Principal(args.tenant, Role.READER)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def direct(text: str) -> float:
        started = time.perf_counter()
        asyncio.run(searcher.search(principal, SearchRequest(query=text, collection=args.collection)))
        return (time.perf_counter() - started) * 1000

    def graphql(text: str, document: str) -> float:
        started = time.perf_counter()
        body = client.post("/graphql", json={"query": document, "variables": {"q": text, "c": args.collection}}).json()
        elapsed = (time.perf_counter() - started) * 1000
        assert "errors" not in body, body
        return elapsed

    for text in texts[:20]:  # warm-up: model, connections, Milvus caches
        direct(text), graphql(text, BARE), graphql(text, WITH_PARENT)
    times: dict[str, list[float]] = {"direct": [], "graphql": [], "graphql+parent": []}
    for i, text in enumerate(texts):
        runs = [("direct", lambda: direct(text)), ("graphql", lambda: graphql(text, BARE)),
                ("graphql+parent", lambda: graphql(text, WITH_PARENT))]
        for name, run in runs[i % 3:] + runs[:i % 3]:
            times[name].append(run())
    server.should_exit = True
    thread.join(timeout=30)
    runtime.close()
    base = statistics.median(times["direct"])
    report = {name: {"n": len(v), "p50_ms": round(statistics.median(v), 2), "p95_ms": round(percentile(v, 0.95), 2),
                     "p50_ratio": round(statistics.median(v) / base, 3)} for name, v in times.items()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
