"""What a tenant costs a serving process: start-up, threads, memory and latency with N tenants.

For each N, it writes N tenant files (one collection each, one reader key each) into a fresh
directory, starts `gateway serve` on loopback over a fresh milvus-lite store, and measures:

- ready: seconds from the start of `serve` until /readyz answers 200;
- a lone tenant's search p50 (the first tenant, sequential searches, nothing else running);
- one search by every tenant at concurrency 8, then OS threads and RSS of the serving process
  (the milvus-lite child is reported apart);
- the last tenant's search p50, measured right after, as the lone tenant's was.

The collections are never ingested (a search of one finds nothing without creating it), so the
figures are what a tenant costs before it stores anything: config, keys, derived objects,
admission and worker state.

    python benchmarks/tenants.py --tenants 1 2000 20000
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import KeepAliveClient, free_port, percentile, start_gateway

QUERY = "how do refunds work for annual plans"


def key_of(index: int) -> str:
    return f"bench-tenant-key-{index:06d}"


def write_tenants(directory: Path, count: int) -> None:
    for index in range(count):
        digest = hashlib.sha256(key_of(index).encode()).hexdigest()
        (directory / f"t{index:06d}.yaml").write_text(
            f"id: t{index:06d}\n"
            f"api_keys:\n  - {{sha256: \"{digest}\", role: reader}}\n"
            "namespaces:\n  main:\n    collections:\n"
            "      docs: {trust_tier: first-party, mode: hybrid, limit: 5}\n", encoding="utf-8")


def proc_status(pid: int) -> tuple[int, float]:
    """(OS threads, RSS MiB) of one process."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def search_payload() -> dict:
    return {"query": "query($q: String!) { search(input: {query: $q, collection: \"docs\"}) { hits { chunk { id } } } }",
            "variables": {"q": QUERY}}


async def sequential_p50(port: int, index: int, count: int) -> float:
    client = KeepAliveClient(port, {"Authorization": f"Bearer {key_of(index)}"}, 1)
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            status, body = await client.post("/graphql", search_payload())
            if status != 200 or body.get("errors"):
                raise SystemExit(f"tenant {index}: HTTP {status} {body}")
            times.append((time.perf_counter() - start) * 1000)
    finally:
        await client.close()
    return percentile(times, 0.5)


async def one_search_each(port: int, count: int, concurrency: int) -> int:
    indexes = iter(range(count))
    failures = 0

    async def client_loop() -> None:
        nonlocal failures
        for index in indexes:
            client = KeepAliveClient(port, {"Authorization": f"Bearer {key_of(index)}"}, 1)
            try:
                status, body = await client.post("/graphql", search_payload())
                failures += status != 200 or bool(body.get("errors"))
            finally:
                await client.close()

    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    return failures


def measure(count: int, samples: int, concurrency: int, work: Path) -> dict:
    directory = work / f"tenants-{count}"
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "tenants").mkdir(parents=True)
    write_tenants(directory / "tenants", count)
    port = free_port()
    env = {"GATEWAY_MILVUS_URI": str(directory / "gateway.db"), "GATEWAY_TENANTS_DIR": str(directory / "tenants"),
           "GATEWAY_INGEST_DEMO_ON_START": "false",
           }
    started = time.monotonic()
    process = start_gateway(env, port, timeout_s=3600)
    ready_s = time.monotonic() - started
    try:
        threads_ready, rss_ready = proc_status(process.pid)
        lone = asyncio.run(sequential_p50(port, 0, samples))
        failures = asyncio.run(one_search_each(port, count, concurrency))
        threads, rss = proc_status(process.pid)
        last = asyncio.run(sequential_p50(port, count - 1, samples))
        lone_again = asyncio.run(sequential_p50(port, 0, samples))
        store = [proc_status(child)[1] for child in children(process.pid)]
    finally:
        process.terminate()
        process.wait(timeout=60)
        shutil.rmtree(directory, ignore_errors=True)
    return {"tenants": count, "ready_s": ready_s, "threads_ready": threads_ready, "threads": threads,
            "rss_ready": rss_ready, "rss": rss, "store_rss": sum(store), "lone_p50": lone, "last_p50": last,
            "lone_again_p50": lone_again, "failures": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 2000])
    parser.add_argument("--samples", type=int, default=50, help="sequential searches per p50")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gateway-tenants-"))
    rows = [measure(count, args.samples, args.concurrency, work) for count in args.tenants]
    print("| tenants | ready s | threads at ready / after one search each | RSS MiB at ready / after | "
          "store child RSS MiB | lone tenant p50 ms | last tenant p50 ms (ratio to lone, same run) | failed |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        lone = min(row["lone_p50"], row["lone_again_p50"])
        print(f"| {row['tenants']:,} | {row['ready_s']:.1f} | {row['threads_ready']} / {row['threads']} | "
              f"{row['rss_ready']:.0f} / {row['rss']:.0f} | {row['store_rss']:.0f} | {row['lone_p50']:.1f} "
              f"(again after: {row['lone_again_p50']:.1f}) | {row['last_p50']:.1f} ({row['last_p50'] / lone:.2f}x) | "
              f"{row['failures']} |")


if __name__ == "__main__":
    main()
