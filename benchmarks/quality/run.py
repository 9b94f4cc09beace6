"""Every shipped pipeline on every BEIR collection found on disk, through the served gateway: one table.

    python benchmarks/quality/run.py --data /path/to/beir-folders [--work /tmp/gateway-quality]

Each folder under --data with corpus.jsonl, queries.jsonl and qrels/test.tsv is a collection (named
after the folder, `-` read as `_`). The script writes one tenant file that gives every collection the
settings of the SciFact collection in --tenant-file (docs/examples/scifact-tenant.yaml: hybrid,
weighted fusion, alpha 0.5, 200 candidates, one chunk per document) and that file's pipelines, the
shipped ones. It ingests every collection into --work (unchanged documents are skipped, so a
re-run embeds nothing), starts `gateway serve` on loopback, and sends every judged query (a query
with at least one relevant document) as a GraphQL `search` with limit 100: plain hybrid and each
pipeline in turn, query by query, so load changes touch them alike. It prints nDCG@10 and
Recall@100 (trec_eval, four decimals) with the query count, the CPU the gateway's process tree
spent per query (user + system, read from /proc around each request at concurrency 1), and the p50
latency as a ratio to hybrid's, at concurrency 1 (every query) and, with --concurrency 8, over the
first --latency-queries queries sent by 8 clients at once, in --rounds rounds that alternate the
configurations (hybrid, each pipeline, hybrid, ...); the ratio printed is the median of the rounds'
ratios, and the CPU ratio at that concurrency is the rounds' summed CPU, pipeline over hybrid. On a
machine with N cores and more than N requests in flight, the p50 ratio tends to the CPU ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after site-packages: benchmarks/ holds names like memory.py
from common import ROOT, KeepAliveClient, free_port, start_gateway, tree_cpu_seconds  # noqa: E402

from gateway.retrieval.evaluation import RANK_DEPTH, load_qrels, load_queries, score  # noqa: E402

TENANT = "quality"
NAMESPACE = "beir"
KEY = "quality-benchmark-key"
HYBRID = "hybrid"
SEARCH = """query($q: String!, $c: String!, $p: String, $n: Int!) {
  search(input: {query: $q, collection: $c, pipeline: $p, limit: $n}) { hits { chunk { sourceId } score } } }"""
# Latency is what is measured, not admission: the one tenant may use every request worker.
OPEN_LIMITS = {"GATEWAY_TENANT_MAX_CONCURRENT": "64", "GATEWAY_TENANT_RATE": "100000", "GATEWAY_TENANT_BURST": "100000",
               "GATEWAY_TENANT_COST_RATE": "100000000", "GATEWAY_TENANT_COST_BURST": "100000000",
               "GATEWAY_TENANT_MAX_INFLIGHT_COST": "100000000", "GATEWAY_DEADLINE_MS": "120000",
               # ArguAna's queries are whole arguments, up to about 3,000 characters.
               "GATEWAY_MAX_QUERY_CHARS": "20000"}


def collections_on_disk(data: Path) -> dict[str, Path]:
    """{collection name: BEIR folder} for every folder under `data` that holds a test split."""
    found = {}
    for folder in sorted(p for p in data.iterdir() if p.is_dir()):
        if all((folder / f).is_file() for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")):
            found[re.sub(r"[^a-z0-9_]", "_", folder.name.lower())] = folder
    if not found:
        raise SystemExit(f"no BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) under {data}")
    return found


def tenant_file(source: Path, names: list[str]) -> tuple[str, list[str]]:
    """The tenant YAML (each collection with the source's SciFact settings) and the pipeline names."""
    shipped = yaml.safe_load(source.read_text())
    settings = shipped["namespaces"]["beir"]["collections"]["scifact"]
    pipelines = shipped.get("pipelines", {})
    document = {"id": TENANT, "api_keys": [{"env": "QUALITY_API_KEY", "role": "reader"}],
                "namespaces": {NAMESPACE: {"collections": {n: dict(settings) for n in names}}},
                "pipelines": pipelines}
    return yaml.safe_dump(document, sort_keys=False), list(pipelines)


def environment(work: Path) -> dict[str, str]:
    return {"GATEWAY_MILVUS_URI": str(work / "store" / "gateway.db"), "GATEWAY_TENANTS_DIR": str(work / "tenants"),
            "GATEWAY_INGEST_DEMO_ON_START": "false", "GATEWAY_QUERY_CACHE_SIZE": "0", "QUALITY_API_KEY": KEY,
            **OPEN_LIMITS}


def ingest(work: Path, folders: dict[str, Path]) -> None:
    gateway = str(Path(sys.executable).parent / "gateway")
    for name, folder in folders.items():
        started = time.perf_counter()
        subprocess.run([gateway, "ingest", "--tenant", TENANT, "--namespace", NAMESPACE, "--collection", name,
                        str(folder / "corpus.jsonl")], env={**os.environ, **environment(work)}, check=True,
                       stdout=subprocess.DEVNULL)
        print(f"ingested {name} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)


def judged(folder: Path) -> tuple[list[tuple[str, str]], dict[str, dict[str, int]]]:
    """(query id, text) of every query with a relevant document, and their judgements."""
    queries, qrels = load_queries(folder / "queries.jsonl"), load_qrels(folder / "qrels/test.tsv")
    kept = {q: r for q, r in qrels.items() if q in queries and any(v > 0 for v in r.values())}
    return [(q, queries[q]) for q in kept], kept


async def search(client: KeepAliveClient, text: str, collection: str, pipeline: str | None) -> tuple[list[str], float]:
    started = time.perf_counter()
    status, body = await client.post("/graphql", {"query": SEARCH, "variables": {
        "q": text, "c": collection, "p": pipeline, "n": RANK_DEPTH}})
    elapsed = (time.perf_counter() - started) * 1000
    if status != 200 or body.get("errors"):
        raise SystemExit(f"{collection} / {pipeline or HYBRID}: HTTP {status}: {str(body)[:500]}")
    return [h["chunk"]["sourceId"] for h in body["data"]["search"]["hits"]], elapsed


async def sequential(port: int, pid: int, collection: str, queries: list[tuple[str, str]],
                     configs: list[str]) -> dict:
    """Every query through every config, interleaved; rankings, latencies and server CPU seconds per config."""
    client = KeepAliveClient(port, {"Authorization": f"Bearer {KEY}"}, connections=1)
    runs: dict[str, dict] = {c: {} for c in configs}
    latencies: dict[str, list[float]] = {c: [] for c in configs}
    cpu = dict.fromkeys(configs, 0.0)
    try:
        for qid, text in queries:
            for config in configs:
                before = tree_cpu_seconds(pid)
                ids, ms = await search(client, text, collection, None if config == HYBRID else config)
                cpu[config] += tree_cpu_seconds(pid) - before
                runs[config][qid] = {d: float(len(ids) - i) for i, d in enumerate(dict.fromkeys(ids))}
                latencies[config].append(ms)
    finally:
        await client.close()
    return {"runs": runs, "latencies": latencies, "cpu": cpu}


async def concurrent(port: int, collection: str, queries: list[tuple[str, str]], config: str, clients: int) -> list[float]:
    client = KeepAliveClient(port, {"Authorization": f"Bearer {KEY}"}, connections=clients)
    pending = list(queries)
    latencies: list[float] = []

    async def worker() -> None:
        while pending:
            _, text = pending.pop()
            latencies.append((await search(client, text, collection, None if config == HYBRID else config))[1])

    try:
        await asyncio.gather(*(worker() for _ in range(clients)))
    finally:
        await client.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a folder of BEIR folders")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gateway-quality"),
                        help="tenant file and store (kept, so a re-run embeds nothing)")
    parser.add_argument("--tenant-file", type=Path, default=ROOT / "docs/examples/scifact-tenant.yaml",
                        help="where the shipped pipelines and the collection settings are read")
    parser.add_argument("--only", help="comma-separated collection names (default: every one found)")
    parser.add_argument("--pipelines", help="comma-separated pipeline names (default: every one in --tenant-file)")
    parser.add_argument("--max-queries", type=int, help="at most this many judged queries per collection (the first)")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 8],
                        help="1 is always measured (every query); others over --latency-queries queries")
    parser.add_argument("--latency-queries", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per concurrency above 1")
    parser.add_argument("--ingest-only", action="store_true")
    args = parser.parse_args()

    folders = collections_on_disk(args.data)
    if args.only:
        folders = {n: folders[n] for n in args.only.split(",")}
    (args.work / "tenants").mkdir(parents=True, exist_ok=True)
    (args.work / "store").mkdir(parents=True, exist_ok=True)
    text, pipelines = tenant_file(args.tenant_file, list(collections_on_disk(args.data)))
    (args.work / "tenants" / f"{TENANT}.yaml").write_text(text)
    ingest(args.work, folders)
    if args.ingest_only:
        return
    configs = [HYBRID, *(args.pipelines.split(",") if args.pipelines else pipelines)]
    port = free_port()
    load_before = os.getloadavg()[0]
    server = start_gateway(environment(args.work), port)
    rows = []
    try:
        for name, folder in folders.items():
            queries, qrels = judged(folder)
            queries = queries[:args.max_queries] if args.max_queries else queries
            qrels = {q: qrels[q] for q, _ in queries}
            measured = asyncio.run(sequential(port, server.pid, name, queries, configs))
            base = statistics.median(measured["latencies"][HYBRID])
            at: dict[int, dict[str, tuple[float, float]]] = {}
            for clients in (c for c in args.concurrency if c != 1):
                sample = queries[:args.latency_queries]
                ratios: dict[str, list[float]] = {c: [] for c in configs}
                cpu = dict.fromkeys(configs, 0.0)
                for _ in range(args.rounds):
                    medians = {}
                    for config in configs:
                        before = tree_cpu_seconds(server.pid)
                        latencies = asyncio.run(concurrent(port, name, sample, config, clients))
                        medians[config] = statistics.median(latencies)
                        cpu[config] += tree_cpu_seconds(server.pid) - before
                    for config in configs:
                        ratios[config].append(medians[config] / medians[HYBRID])
                at[clients] = {c: (statistics.median(ratios[c]), cpu[c] / cpu[HYBRID]) for c in configs}
                print(f"{name} c={clients} p50 ratios per round: {ratios}", file=sys.stderr)
            for config in configs:
                metrics = score(measured["runs"][config], qrels)
                p50 = statistics.median(measured["latencies"][config])
                cpu_ms = 1000 * measured["cpu"][config] / len(queries)
                rows.append((name, config, len(queries), metrics["ndcg@10"], metrics["recall@100"], cpu_ms,
                             cpu_ms / (1000 * measured["cpu"][HYBRID] / len(queries)), p50, p50 / base,
                             {c: at[c][config] for c in at}))
                print(f"{name} {config}: {metrics}", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=60)
    extra = [c for c in args.concurrency if c != 1]
    print(f"\nload average at the start / end: {load_before:.1f} / {os.getloadavg()[0]:.1f}\n")
    print("| collection | search | queries | nDCG@10 | Recall@100 | CPU ms/query | CPU vs hybrid | p50 ms (c=1) "
          "| p50 vs hybrid (c=1) | " + " | ".join(f"p50 vs hybrid (c={c}) | CPU vs hybrid (c={c})" for c in extra)
          + " |")
    print("| --- " * (9 + 2 * len(extra)) + "|")
    for name, config, n, ndcg, recall, cpu_ms, cpu_ratio, p50, ratio, ratios in rows:
        print(f"| {name} | {config} | {n} | {ndcg:.4f} | {recall:.4f} | {cpu_ms:.0f} | {cpu_ratio:.2f}x | {p50:.0f} "
              f"| {ratio:.2f}x | " + " | ".join(f"{ratios[c][0]:.2f}x | {ratios[c][1]:.2f}x" for c in extra) + " |")


if __name__ == "__main__":
    main()
