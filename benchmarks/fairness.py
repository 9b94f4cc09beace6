"""Tenant fairness under load: a quiet tenant's latency alone and while another tenant floods.

Starts `gateway serve` on loopback over a fresh milvus-lite file with the demo tenants (the
server is its own process, so the clients here do not share its interpreter). The quiet tenant
(globex) sends sequential small searches; the flooder (acme) runs `--concurrency` clients in a
separate process with one of three floods:

  plain    hybrid, limit 100, long unique queries, every hit field including parents
  aliases  15 aliased searches like that per request (the allowed maximum)
  heavy    the `evidence` pipeline (late interaction, parents, compression, diversity), limit
           100, with a 4-condition filter of 256-value NIN lists (1,024 values: the most a
           filter may hold; 16 x 256 is refused as INVALID_FILTER since the filter caps), under
           the default cost ceiling; one over the ceiling is sent too, and must be refused

The flooder's clients honour Retry-After on a 429. Phases run interleaved (alone, plain,
aliases, heavy, then again) for `--cycles` cycles, each bounded by `--quiet` requests and
`--phase-timeout` seconds. Prints one JSON line per phase and a summary with ratios.

    python benchmarks/fairness.py --cycles 2 --quiet 60 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, free_port, percentile, start_gateway  # noqa: E402

QUIET_KEY, FLOOD_KEY = "demo-globex-reader", "demo-acme-reader"
WORDS = ("refund invoice storage bucket replication outage billing region latency quota snapshot encryption "
         "archive lifecycle upload download retention versioning policy access token endpoint migration "
         "shipment parcel customs tracking warehouse carrier delivery").split()
HIT = ("chunk { id sourceId chunkId title metadata sourceUrl } content score parent { key content } "
       "provenance { tenant collection trustTier mode scores { signal raw rank } fusedScore contentHash }")
QUIET = 'query($q: String!) { search(input: {query: $q, collection: "docs", limit: 5}) { hits { chunk { sourceId chunkId } score } } }'
PLAIN = 'query($q: String!) { search(input: {query: $q, limit: 100}) { hits { %s } } }' % HIT
ALIASES = "query($q: String!) { " + " ".join(
    f'a{i}: search(input: {{query: $q, limit: 100}}) {{ hits {{ {HIT} }} }}' for i in range(15)) + " }"
HEAVY = ('query($q: String!, $f: FilterInput) { search(input: {query: $q, collection: "tickets", limit: 100, '
         'pipeline: "evidence", filter: $f}) { hits { %s } } }' % HIT)


def nin_filter(conditions: int, values: int) -> dict:
    return {"and": [{"field": "metadata.status", "op": "NIN", "value": [f"s{c}-{v}" for v in range(values)]}
                    for c in range(conditions)]}


FLOODS = {
    "plain": (PLAIN, lambda: {}),
    "aliases": (ALIASES, lambda: {}),
    "heavy": (HEAVY, lambda: {"f": nin_filter(4, 256)}),
}


def long_query(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(60)) + f" {rng.randrange(10**9)}"


def start_server(data_dir: Path, port: int, extra_env: dict[str, str], workers: int) -> subprocess.Popen:
    env = {"GATEWAY_MILVUS_URI": str(data_dir / "gateway.db"), "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), **extra_env}
    return start_gateway(env, port, *(["--workers", str(workers)] if workers > 1 else []))


def flood(url: str, kind: str, concurrency: int, stop: multiprocessing.Event, results: multiprocessing.Queue) -> None:
    """The flooder process: `concurrency` clients, each honouring Retry-After (capped at 2 s)."""
    document, variables = FLOODS[kind]

    async def client(index: int, counts: dict[str, int], latencies: list[float], said: set[str]) -> None:
        rng = random.Random(index)
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {FLOOD_KEY}"},
                                     timeout=120) as http:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    answer = await http.post("/graphql", json={"query": document,
                                                               "variables": {"q": long_query(rng), **variables()}})
                except httpx.HTTPError as exc:
                    counts[f"transport:{type(exc).__name__}"] = counts.get(f"transport:{type(exc).__name__}", 0) + 1
                    continue
                body = answer.json()
                code = body["errors"][0]["extensions"]["code"] if body.get("errors") else "OK"
                counts[code] = counts.get(code, 0) + 1
                if code == "OK":
                    latencies.append((time.perf_counter() - started) * 1000)
                if answer.status_code == 429:
                    said.add(body["errors"][0]["message"].split(";")[0][:160])
                    await asyncio.sleep(min(2.0, float(answer.headers.get("Retry-After", "1"))))

    async def main() -> None:
        counts: dict[str, int] = {}
        latencies: list[float] = []
        said: set[str] = set()
        started = time.perf_counter()
        await asyncio.gather(*(client(i, counts, latencies, said) for i in range(concurrency)))
        results.put({"counts": counts, "seconds": time.perf_counter() - started,
                     "flood_p50_ms": round(statistics.median(latencies), 1) if latencies else None,
                     "reasons": sorted(said)[:4]})

    asyncio.run(main())


def quiet_phase(url: str, count: int, timeout_s: float, rng: random.Random) -> dict:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    ended = time.monotonic() + timeout_s
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {QUIET_KEY}"}, timeout=timeout_s) as http:
        for _ in range(count):
            if time.monotonic() > ended:
                errors["phase_timeout"] = errors.get("phase_timeout", 0) + 1
                break
            text = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.randrange(10**6)}"
            started = time.perf_counter()
            try:
                body = http.post("/graphql", json={"query": QUIET, "variables": {"q": text}}).json()
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            if body.get("errors"):
                code = body["errors"][0]["extensions"]["code"]
                errors[code] = errors.get(code, 0) + 1
            else:
                latencies.append((time.perf_counter() - started) * 1000)
    return {"quiet_n": len(latencies), "quiet_p50_ms": round(percentile(latencies, 0.5), 1),
            "quiet_p95_ms": round(percentile(latencies, 0.95), 1), "quiet_errors": errors}


def run_phase(url: str, kind: str | None, args: argparse.Namespace, rng: random.Random) -> dict:
    if kind is None:
        return {"phase": "alone", **quiet_phase(url, args.quiet, args.phase_timeout, rng)}
    stop = multiprocessing.Event()
    results: multiprocessing.Queue = multiprocessing.Queue()
    flooder = multiprocessing.Process(target=flood, args=(url, kind, args.concurrency, stop, results))
    flooder.start()
    time.sleep(args.warmup)  # let the flood fill the server's queues first
    quiet = quiet_phase(url, args.quiet, args.phase_timeout, rng)
    stop.set()
    report = results.get(timeout=180)
    flooder.join(timeout=30)
    counts = report["counts"]
    ok = counts.get("OK", 0)
    return {"phase": kind, **quiet, "flood_ok": ok, "flood_ok_per_s": round(ok / report["seconds"], 2),
            "flood_429": counts.get("RATE_LIMITED", 0), "flood_codes": counts, "flood_p50_ms": report["flood_p50_ms"],
            "flood_told": report["reasons"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--quiet", type=int, default=60, help="quiet-tenant requests per phase")
    parser.add_argument("--concurrency", type=int, default=32, help="flooder clients")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of flood before the quiet tenant starts")
    parser.add_argument("--phase-timeout", type=float, default=90.0)
    parser.add_argument("--floods", default="plain,aliases,heavy")
    parser.add_argument("--env", action="append", default=[], help="extra GATEWAY_*=value for the server")
    parser.add_argument("--workers", type=int, default=1, help="gateway serve --workers N (limits are per process)")
    args = parser.parse_args()
    floods = [f for f in args.floods.split(",") if f]
    extra = dict(item.split("=", 1) for item in args.env)
    data_dir = Path(tempfile.mkdtemp(prefix="fairness-"))
    port = free_port()
    server = start_server(data_dir, port, extra, args.workers)
    url = f"http://127.0.0.1:{port}"
    rng = random.Random(7)
    rows: list[dict] = []
    try:
        over = httpx.post(f"{url}/graphql", headers={"Authorization": f"Bearer {FLOOD_KEY}"}, timeout=60,
                          json={"query": HEAVY, "variables": {"q": "refund", "f": nin_filter(64, 1024)}})
        print(json.dumps({"over_ceiling_status": over.status_code,
                          "over_ceiling": over.json()["errors"][0]["message"][:200]}), flush=True)
        quiet_phase(url, 10, 60, rng)  # warm the quiet tenant's path
        for cycle in range(1, args.cycles + 1):
            for kind in [None, *floods]:
                row = {"cycle": cycle, **run_phase(url, kind, args, rng)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                time.sleep(2)  # let the server drain between phases
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)
    for cycle in range(1, args.cycles + 1):
        alone = next(r for r in rows if r["cycle"] == cycle and r["phase"] == "alone")
        for row in (r for r in rows if r["cycle"] == cycle and r["phase"] != "alone"):
            print(json.dumps({"cycle": cycle, "flood": row["phase"],
                              "p50_ratio": round(row["quiet_p50_ms"] / alone["quiet_p50_ms"], 2),
                              "p95_ratio": round(row["quiet_p95_ms"] / alone["quiet_p95_ms"], 2),
                              "quiet_errors": sum(row["quiet_errors"].values()),
                              "flood_ok_per_s": row["flood_ok_per_s"], "flood_429": row["flood_429"]}))
    rejections = [line for line in metrics.splitlines() if line.startswith("gateway_rejections_total{")]
    print(json.dumps({"rejections": rejections}))


if __name__ == "__main__":
    main()
