"""The gateway's own cost per search under load, against the floor of the work it must do.

Five paths answer the same queries over the same milvus-lite collection, each in a fresh
process, interleaved per cycle (the order rotates), at each concurrency:

  gateway      POST /graphql to `gateway serve` (its own process; the client runs here), the
               full hit selection (content, title, metadata, source, provenance)
  gateway-ids  the same, selecting only ids and scores
  searcher     the in-process Searcher (routing, options, retrieval, fusion; no HTTP/GraphQL)
  floor        the necessary work only: the project's embedder and BM25 analyzer, the same dense
               and sparse Milvus searches (candidates, boundary filter, every stored field), RRF
               in plain Python
  floor-fill   the floor as the gateway now fetches: searches of primary keys only, then the ten
               returned rows' stored fields by primary key (MilvusStore.fill)

By default every path reaches the store the way `gateway serve` does: through milvus-lite's
server as a child process on loopback (`--store served`; the searcher and the floor start one
for their run), so the comparison is like for like. `--store embedded` opens the store inside
the searcher's and the floor's process instead (the gateway always serves).

Reports QPS, p50/p95, CPU ms per query (the serving process tree, milvus-lite included), the
time its threads waited runnable for a CPU per query (the scheduler's run delay; each run's JSON
line also gives `threads`: per group of threads, ms run, ms waited and times scheduled a query), errors, top-10 agreement with the floor, and the ratios to the floor and to floor-fill (median
of the per-cycle ratios). `--processes N` serves the gateway paths with N processes on the one
store (`gateway serve --workers N`); a path written `gateway:N` is served by N processes whatever
`--processes` says, so `--paths gateway,gateway:2,floor` compares one and two processes in one run. A path written
`gateway@DIR` runs the code of the checkout DIR (a `git worktree` of another commit), so
`--paths gateway@/tmp/before,gateway,floor` compares two versions of the code interleaved.
Tenant limits are raised so admission does not throttle the one tenant (`--default-limits`
keeps the defaults). The query-embedding cache is off on every path.

`--background N` keeps N CPU-bound processes busy during every run. Where they live matters, since
the kernel's autogroup scheduling (on when /proc/sys/kernel/sched_autogroup_enabled is 1) shares CPU
between sessions first and then between each session's threads: `--sessions shared` runs every path
and the background processes in this session (thread against thread), `--sessions apart` gives each
path's run and each background process a session of its own, as programs started separately (a
service, a terminal, a container) have; `--sessions shared,apart` runs both, interleaved.

    python benchmarks/throughput.py --corpus $SCIFACT/corpus.jsonl --queries $SCIFACT/queries.jsonl \
        --docs 1400 --count 200 --cycles 3 --concurrency 1,8 --work /tmp/throughput
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (ROOT, KeepAliveClient, free_port, per_query_threads, percentile, start_gateway,  # noqa: E402
                    thread_schedstats, tree_cpu_seconds, waited_seconds)

KEY = "throughput-benchmark-key"
TENANT = f"""id: bench
api_keys:
  - {{env: THROUGHPUT_API_KEY, role: reader}}
namespaces:
  bench:
    collections:
      corpus:
        trust_tier: third-party
        mode: hybrid
        fusion: rrf
        candidates: 50
        limit: 10
        chunking: {{child_chars: 8000, child_overlap: 0, parent_chars: 8000}}
"""
FULL = """query($q: String!) { search(input: {query: $q, collection: "corpus"}) { hits {
  chunk { id sourceId chunkId title metadata sourceUrl sourcePath } content score
  provenance { tenant collection trustTier mode scores { signal raw rank } fusedScore contentHash ingestedAt } } } }"""
IDS = 'query($q: String!) { search(input: {query: $q, collection: "corpus"}) { hits { chunk { sourceId chunkId } score } } }'
PATHS = ("gateway", "gateway-ids", "searcher", "floor", "floor-fill")
OPEN_LIMITS = {"GATEWAY_TENANT_MAX_CONCURRENT": "64", "GATEWAY_TENANT_RATE": "100000", "GATEWAY_TENANT_BURST": "100000",
               "GATEWAY_TENANT_COST_RATE": "100000000", "GATEWAY_TENANT_COST_BURST": "100000000",
               "GATEWAY_TENANT_MAX_INFLIGHT_COST": "100000000"}


def environment(work: Path, default_limits: bool, workers: int | None = None) -> dict[str, str]:
    """The gateway's settings. Open limits let the one tenant use every request worker (the
    gateway's default number of them unless `workers` says otherwise)."""
    from gateway.admission.workers import default_workers

    workers = workers or default_workers()
    opened = {**OPEN_LIMITS, "GATEWAY_REQUEST_WORKERS": str(workers), "GATEWAY_TENANT_MAX_RUNNING": str(workers)}
    return {"GATEWAY_MILVUS_URI": str(work / "store" / "gateway.db"), "GATEWAY_TENANTS_DIR": str(work / "tenants"),
            "GATEWAY_INGEST_DEMO_ON_START": "false", "GATEWAY_QUERY_CACHE_SIZE": "0", "THROUGHPUT_API_KEY": KEY,
            **({} if default_limits else opened)}


def prepare(args: argparse.Namespace) -> None:
    """The tenant file and the first `--docs` documents, ingested once."""
    (args.work / "tenants").mkdir(parents=True, exist_ok=True)
    (args.work / "tenants" / "bench.yaml").write_text(TENANT)
    if (args.work / "store").exists():
        return
    corpus = args.work / "corpus.jsonl"
    with args.corpus.open() as source, corpus.open("w") as target:
        for _, line in zip(range(args.docs), source):
            target.write(line)
    subprocess.run([str(Path(sys.executable).parent / "gateway"), "ingest", "--tenant", "bench", "--namespace", "bench",
                    "--collection", "corpus", str(corpus)], env={**os.environ, **environment(args.work, False)},
                   check=True, stdout=subprocess.DEVNULL)


def queries(path: Path, count: int) -> list[tuple[str, str]]:
    with path.open() as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [(str(r["_id"]), r["text"]) for r in rows[:count]]


# -- one path, in this (fresh) process -----------------------------------------------------

async def bounded(items: list[tuple[str, str]], concurrency: int, one) -> tuple[list[float], dict, int, float]:
    """Run `one(text)` -> top ids over every query at this concurrency; latencies, tops, errors, wall."""
    semaphore = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    tops: dict[str, list[str]] = {}
    errors = 0

    async def run(qid: str, text: str) -> None:
        nonlocal errors
        async with semaphore:
            start = time.perf_counter()
            try:
                tops[qid] = await one(text)
                latencies.append(time.perf_counter() - start)
            except Exception:  # noqa: BLE001 - counted and reported, the run goes on
                errors += 1

    start = time.perf_counter()
    await asyncio.gather(*(run(qid, text) for qid, text in items))
    return latencies, tops, errors, time.perf_counter() - start


async def via_http(args: argparse.Namespace, items: list, document: str) -> dict:
    port = free_port()
    server = start_gateway(environment(args.work, args.default_limits, args.workers), port,
                           *(["--workers", str(args.processes)] if args.processes > 1 else []))
    client = KeepAliveClient(port, {"Authorization": f"Bearer {KEY}"}, connections=args.concurrency)
    try:
        async def one(text: str) -> list[str]:
            _, body = await client.post("/graphql", {"query": document, "variables": {"q": text}})
            if "errors" in body:
                raise RuntimeError(body["errors"][0]["message"])
            return [f"{h['chunk']['sourceId']}/{h['chunk']['chunkId']}" for h in body["data"]["search"]["hits"]]

        await bounded(items[:10], args.concurrency, one)  # warm connections and first-use paths
        cpu, threads, loader = tree_cpu_seconds(server.pid), thread_schedstats(server.pid), time.process_time()
        latencies, tops, errors, wall = await bounded(items, args.concurrency, one)
        cpu, loader, after = tree_cpu_seconds(server.pid) - cpu, time.process_time() - loader, thread_schedstats(server.pid)
        waited = waited_seconds(after) - waited_seconds(threads)
        threads = per_query_threads(threads, after, len(latencies))
        await client.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {**summary(latencies, tops, errors, wall, cpu, waited),
            "client_cpu_ms_per_query": 1000 * loader / max(1, len(items)), "threads": threads}


@contextlib.contextmanager
def store_uri(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """The URI the searcher and the floor open, and the secret it needs: a served milvus-lite
    child (a child of this process, so its CPU is counted), or the directory itself, embedded."""
    path = args.work / "store" / "gateway.db"
    if args.store == "embedded":
        yield str(path), ""
        return
    from gateway.storage.record import StorePaths
    from gateway.storage.server import SupervisedServer

    with SupervisedServer(StorePaths(path)) as server:
        yield server.uri, server.token


async def via_searcher(args: argparse.Namespace, items: list) -> dict:
    with store_uri(args):  # build_runtime finds a served store through its location file
        return await _via_searcher(args, items)


async def _via_searcher(args: argparse.Namespace, items: list) -> dict:
    from gateway.routing.searcher import SearchRequest, Searcher
    from gateway.runtime import build_runtime
    from gateway.settings import Settings
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role

    os.environ.update(environment(args.work, args.default_limits, args.workers))
    settings = Settings()
    runtime = build_runtime(settings)
    searcher = Searcher(runtime.registry, runtime.store, runtime.embedder, settings, tokens=runtime.tokens)
    principal = Principal("bench", Role.READER)
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(16))

    async def one(text: str) -> list[str]:
        result = await searcher.search(principal, SearchRequest(text, collection="corpus"))
        return [f"{h.source_id}/{h.chunk_id}" for h in result.hits]

    await bounded(items[:10], args.concurrency, one)
    cpu, threads = tree_cpu_seconds(os.getpid()), thread_schedstats(os.getpid())
    latencies, tops, errors, wall = await bounded(items, args.concurrency, one)
    cpu, after = tree_cpu_seconds(os.getpid()) - cpu, thread_schedstats(os.getpid())
    return {**summary(latencies, tops, errors, wall, cpu, waited_seconds(after) - waited_seconds(threads)),
            "threads": per_query_threads(threads, after, len(latencies))}


async def via_floor(args: argparse.Namespace, items: list, fill: bool = False) -> dict:
    with store_uri(args) as (uri, token):
        return await _via_floor(args, items, uri, token, fill)


async def _via_floor(args: argparse.Namespace, items: list, uri: str, token: str, fill: bool) -> dict:
    from pymilvus import MilvusClient

    from gateway.embedding.bundled import BundledEmbedder
    from gateway.storage.analyzer import Analyzer
    from gateway.storage.filters import literal, scoped_expression
    from gateway.storage.schema import CHUNK_OUTPUT_FIELDS, Scope

    embedder, analyzer = BundledEmbedder(), Analyzer()
    client = MilvusClient(uri, token=token)
    collection = Scope("bench", "bench", "corpus").chunk_collection
    client.load_collection(collection)
    boundary = scoped_expression("bench", "bench", None)
    pool = ThreadPoolExecutor(16)

    fetched = ["id"] if fill else CHUNK_OUTPUT_FIELDS  # a row id is namespace/source/chunk

    def search(text: str) -> list[str]:
        vector = embedder.embed_query(text)
        dense = client.search(collection, data=[vector.tolist()], anns_field="dense", limit=50, filter=boundary,
                              output_fields=fetched, search_params={"metric_type": "COSINE"})[0]
        sparse = client.search(collection, data=[analyzer.analyse(text)], anns_field="sparse", limit=50,
                               filter=boundary, output_fields=fetched, search_params={"metric_type": "BM25"})[0]
        fused: dict[str, float] = {}
        for ranked in (dense, sparse):
            for rank, hit in enumerate(ranked, start=1):
                fused[hit["id"]] = fused.get(hit["id"], 0.0) + 1.0 / (60 + rank)
        best = sorted(fused, key=lambda key: (-fused[key], key))[:10]
        if fill:
            rows = {row["id"]: row for row in client.query(
                collection, filter=f"id in [{', '.join(literal(key) for key in best)}]", output_fields=CHUNK_OUTPUT_FIELDS)}
            best = [key for key in best if key in rows]
        return [key.split("/", 1)[1] for key in best]  # row id namespace/source/chunk -> source/chunk

    async def one(text: str) -> list[str]:
        return await asyncio.get_running_loop().run_in_executor(pool, search, text)

    await bounded(items[:10], args.concurrency, one)
    cpu, threads = tree_cpu_seconds(os.getpid()), thread_schedstats(os.getpid())
    latencies, tops, errors, wall = await bounded(items, args.concurrency, one)
    cpu, after = tree_cpu_seconds(os.getpid()) - cpu, thread_schedstats(os.getpid())
    return {**summary(latencies, tops, errors, wall, cpu, waited_seconds(after) - waited_seconds(threads)),
            "threads": per_query_threads(threads, after, len(latencies))}


def summary(latencies: list[float], tops: dict, errors: int, wall: float, cpu: float, waited: float) -> dict:
    """`waited_ms_per_query`: the serving threads' time runnable but without a CPU, per query."""
    done = max(1, len(latencies))
    return {"qps": len(latencies) / wall, "p50_ms": 1000 * percentile(latencies, 0.5),
            "p95_ms": 1000 * percentile(latencies, 0.95), "cpu_ms_per_query": 1000 * cpu / done,
            "waited_ms_per_query": 1000 * waited / done, "errors": errors, "tops": tops}


def run_path(args: argparse.Namespace) -> None:
    items = queries(args.queries, args.count)
    args.run, _, processes = args.run.partition(":")
    if processes:
        args.processes = int(processes)
    if args.run == "gateway":
        result = asyncio.run(via_http(args, items, FULL))
    elif args.run == "gateway-ids":
        result = asyncio.run(via_http(args, items, IDS))
    elif args.run == "searcher":
        result = asyncio.run(via_searcher(args, items))
    else:
        result = asyncio.run(via_floor(args, items, fill=args.run == "floor-fill"))
    print(json.dumps(result))


# -- the interleaved run ---------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gateway-throughput"))
    parser.add_argument("--docs", type=int, default=1400)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--store", choices=("served", "embedded"), default="served",
                        help="how the searcher and the floor reach the store (the gateway always serves)")
    parser.add_argument("--default-limits", action="store_true", help="keep the default per-tenant admission limits")
    parser.add_argument("--workers", type=int, help="the gateway's request workers (default: its own default); "
                                                     "the floor's and the searcher's pools stay at 16 threads")
    parser.add_argument("--processes", type=int, default=1,
                        help="gateway processes serving the one store (`gateway serve --workers N`); the "
                             "searcher and the floor stay one process")
    parser.add_argument("--background", type=int, default=0,
                        help="CPU-bound processes kept busy during every path's run (a loaded machine)")
    parser.add_argument("--sessions", default="shared",
                        help="shared: every path and background process in this session; apart: each path "
                             "run and each background process in a session of its own, as programs started "
                             "separately are (with autogroup scheduling the kernel shares CPU between "
                             "sessions first, then between their threads); `shared,apart` runs both, "
                             "interleaved")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # one path, in a child process
    args = parser.parse_args()
    if args.run:
        args.concurrency = int(args.concurrency)
        run_path(args)
        return
    args.corpus, args.queries, args.work = args.corpus.resolve(), args.queries.resolve(), args.work.resolve()
    prepare(args)
    paths = args.paths.split(",")
    for path in paths:
        named, _, checkout = path.partition("@")
        name, _, processes = named.partition(":")
        if name not in PATHS or (processes and (not name.startswith("gateway") or not processes.isdigit())):
            parser.error(f"unknown path {path!r}: one of {', '.join(PATHS)}; a gateway path may name its "
                         "processes, e.g. gateway:2")
        if checkout and not (Path(checkout) / "gateway" / "__init__.py").is_file():
            parser.error(f"path {path!r}: {checkout!r} is not a checkout of this project (no gateway/__init__.py)")
    sessions = args.sessions.split(",")
    if any(mode not in ("shared", "apart") for mode in sessions):
        parser.error(f"unknown --sessions {args.sessions!r}: shared, apart, or both separated by a comma")
    results: dict[str, dict[tuple[int, str], list[dict]]] = {mode: {} for mode in sessions}
    for cycle in range(args.cycles):
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            for mode in sessions[cycle % len(sessions):] + sessions[:cycle % len(sessions)]:
                order = paths[cycle % len(paths):] + paths[:cycle % len(paths)]
                for path in order:
                    named, _, checkout = path.partition("@")
                    command = ([sys.executable, __file__, "--run", named, "--corpus", str(args.corpus), "--queries",
                               str(args.queries), "--work", str(args.work), "--count", str(args.count),
                               "--concurrency", str(concurrency), "--store", args.store]
                               + (["--default-limits"] if args.default_limits else [])
                               + (["--workers", str(args.workers)] if args.workers else [])
                               + ["--processes", str(args.processes)])
                    apart = mode == "apart"
                    with busy(args.background, apart):
                        # In DIR, so that a child the checkout starts with `python -m` (its store's server)
                        # imports DIR's code even where the checkout predates gateway/children.py.
                        output = subprocess.run(command, check=True, capture_output=True, text=True,
                                                cwd=checkout or ROOT, start_new_session=apart,
                                                env=checkout_env(checkout)).stdout
                    result = json.loads(output.strip().splitlines()[-1])
                    results[mode].setdefault((concurrency, path), []).append(result)
                    print(json.dumps({"cycle": cycle, "sessions": mode, "concurrency": concurrency, "path": path,
                                      **{k: round(v, 2) if isinstance(v, (int, float)) else v
                                         for k, v in result.items() if k != "tops"}}), flush=True)
    for mode in sessions:
        print(f"\nsessions: {mode}, background processes: {args.background}, load average now: "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        report(results[mode])


def checkout_env(checkout: str) -> dict[str, str]:
    """The environment of a path's run: `gateway@DIR` imports the gateway from the checkout DIR
    (its `gateway serve` too), to compare two versions of the code interleaved on one machine."""
    if not checkout:
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (checkout, os.environ.get("PYTHONPATH"))))}


@contextlib.contextmanager
def busy(processes: int, apart: bool = False) -> Iterator[None]:
    """`processes` pure-Python busy loops, each ending by itself after an hour at the latest (each in
    a session of its own when `apart`)."""
    loops = [subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 3600\n"
                               "while time.monotonic() < end: pass"], start_new_session=apart)
             for _ in range(processes)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def report(results: dict[tuple[int, str], list[dict]]) -> None:
    """Medians over cycles, and each metric's median per-cycle ratio to the floor (and, when it ran,
    the QPS and p50 ratios to the floor that fetches as the gateway does, `floor-fill`)."""
    print("\n| concurrency | path | QPS | p50 ms | p95 ms | CPU ms/query | errors | top-10 = floor "
          "| QPS ratio | p50 ratio | CPU ratio | waited ms/query | QPS ratio to floor-fill | p50 ratio to floor-fill |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (concurrency, path), runs in sorted(results.items()):
        floors = results.get((concurrency, "floor"), [])
        ratio = {metric: _ratio(runs, floors, metric) for metric in ("qps", "p50_ms", "cpu_ms_per_query")}
        filled = results.get((concurrency, "floor-fill"), [])
        to_fill = {metric: _ratio(runs, filled, metric) for metric in ("qps", "p50_ms")}
        agree = "-"
        if floors:
            same = sum(run["tops"].get(q) == top for run, floor in zip(runs, floors) for q, top in floor["tops"].items())
            agree = f"{same}/{sum(len(floor['tops']) for floor in floors)}"
        med = {m: statistics.median(r[m] for r in runs)
               for m in ("qps", "p50_ms", "p95_ms", "cpu_ms_per_query", "waited_ms_per_query")}
        print(f"| {concurrency} | {path} | {med['qps']:.1f} | {med['p50_ms']:.1f} | {med['p95_ms']:.1f} "
              f"| {med['cpu_ms_per_query']:.1f} | {sum(r['errors'] for r in runs)} | {agree} | {ratio['qps']} "
              f"| {ratio['p50_ms']} | {ratio['cpu_ms_per_query']} | {med['waited_ms_per_query']:.1f} | {to_fill['qps']} "
              f"| {to_fill['p50_ms']} |")


def _ratio(runs: list[dict], floors: list[dict], metric: str) -> str:
    pairs = [run[metric] / floor[metric] for run, floor in zip(runs, floors) if floor[metric]]
    return f"{statistics.median(pairs):.2f}×" if pairs else "-"


if __name__ == "__main__":
    main()
