"""What a tenant costs a serving process: start-up, threads, memory and latency with N tenants.

For each N, it writes N tenant files (one collection each, one reader key each) into a fresh
directory, starts `gateway serve` on loopback over a fresh milvus-lite store, and measures:

- ready: seconds from the start of `serve` until /readyz answers 200;
- a lone tenant's search p50 (the first tenant, sequential searches, nothing else running);
- one search by every tenant at concurrency 8, then OS threads and RSS of the serving process
  (the milvus-lite child is reported apart);
- the last tenant's search p50, measured right after, alternating with the first tenant's
  (the ratio compares the two in the same minutes).

The collections are never ingested (a search of one finds nothing without creating it), so the
figures are what a tenant costs before it stores anything: config, keys, derived objects,
admission and worker state.

With `--states N`, it measures tenant states instead: N tenants of `--chunks` chunks each (random
unit vectors and generated texts, written straight into the store before serving), every tenant
searched once (all active), then only `--active` of them searching while the idle sweep
(GATEWAY_TENANT_IDLE_S) releases the others: RSS of the gateway and of the store's process in
both states, and what an inactive tenant's first search costs.

    python benchmarks/tenants.py --tenants 1 2000 20000
    python benchmarks/tenants.py --states 1000 --chunks 200
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import KeepAliveClient, free_port, percentile, start_gateway  # noqa: E402

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


async def alternating_p50(port: int, first: int, second: int, count: int) -> tuple[float, float]:
    clients = [KeepAliveClient(port, {"Authorization": f"Bearer {key_of(i)}"}, 1) for i in (first, second)]
    times: list[list[float]] = [[], []]
    try:
        for _ in range(count):
            for which, client in enumerate(clients):
                start = time.perf_counter()
                status, body = await client.post("/graphql", search_payload())
                if status != 200 or body.get("errors"):
                    raise SystemExit(f"HTTP {status} {body}")
                times[which].append((time.perf_counter() - start) * 1000)
    finally:
        for client in clients:
            await client.close()
    return percentile(times[0], 0.5), percentile(times[1], 0.5)


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
        # The last tenant and the first, one search each in turn, so that both see the same machine.
        last, lone_again = asyncio.run(alternating_p50(port, count - 1, 0, samples))
        store = [proc_status(child)[1] for child in children(process.pid)]
    finally:
        process.terminate()
        process.wait(timeout=60)
        shutil.rmtree(directory, ignore_errors=True)
    return {"tenants": count, "ready_s": ready_s, "threads_ready": threads_ready, "threads": threads,
            "rss_ready": rss_ready, "rss": rss, "store_rss": sum(store), "lone_p50": lone, "last_p50": last,
            "lone_again_p50": lone_again, "failures": failures}


WORDS = ("refund invoice outage billing shipment parcel account password export report region latency "
         "backup restore policy contract upgrade plan seat token webhook").split()


def fill_store(path: Path, count: int, chunks: int, dim: int = 384) -> None:
    """`chunks` rows in each of `count` tenants' collections, written directly (no embedding)."""
    import numpy as np

    from gateway.storage.milvus import ChunkRecord, MilvusStore, ParentRecord
    from gateway.storage.schema import Scope

    rng = np.random.default_rng(7)
    path.parent.mkdir(parents=True, exist_ok=True)
    store = MilvusStore(str(path), dim=dim)
    try:
        for index in range(count):
            scope = Scope(f"t{index:06d}", "main", "docs")
            store.ensure(scope)
            vectors = rng.standard_normal((chunks, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            records = []
            for row in range(chunks):
                text = " ".join(WORDS[(row * 7 + k * 3 + index) % len(WORDS)] for k in range(60))
                records.append(ChunkRecord(source_id=f"s{row // 4}", chunk_id=str(row % 4), parent_key=f"s{row // 4}#p0",
                                           text=text, title=f"Source {row // 4}", content_hash=f"{index}-{row}",
                                           created_at=1_700_000_000_000, updated_at=1_700_000_000_000,
                                           dense=vectors[row], index_text=text))
            store.upsert_chunks(scope, records)
            store.upsert_parents(scope, [ParentRecord(key=f"s{k}#p0", source_id=f"s{k}", title=f"Source {k}",
                                                      text="parent", content_hash=f"p{k}")
                                         for k in range(chunks // 4)])
            if index % 100 == 99:
                print(f"  filled {index + 1} tenants", flush=True)
    finally:
        store.close()


def states(count: int, chunks: int, active: int, idle_s: float, samples: int, work: Path) -> None:
    directory = work / f"states-{count}"
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "tenants").mkdir(parents=True)
    write_tenants(directory / "tenants", count)
    started = time.monotonic()
    # In a process of its own: the embedded engine keeps the store's lock until its process ends.
    filler = multiprocessing.get_context("spawn").Process(target=fill_store,
                                                          args=(directory / "store" / "gateway.db", count, chunks))
    filler.start()
    filler.join()
    if filler.exitcode:
        raise SystemExit(f"filling the store failed (exit {filler.exitcode})")
    print(f"filled {count} tenants x {chunks} chunks in {time.monotonic() - started:.0f} s", flush=True)
    port = free_port()
    env = {"GATEWAY_MILVUS_URI": str(directory / "store" / "gateway.db"),
           "GATEWAY_TENANTS_DIR": str(directory / "tenants"),
           "GATEWAY_INGEST_DEMO_ON_START": "false", "GATEWAY_TENANT_IDLE_S": str(idle_s)}
    process = start_gateway(env, port, timeout_s=3600)

    def rss() -> tuple[float, float]:
        return proc_status(process.pid)[1], sum(proc_status(child)[1] for child in children(process.pid))

    try:
        at_start = rss()
        asyncio.run(one_search_each(port, count, 8))
        all_active = rss()

        async def keep_active(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for index in range(active):
                    await sequential_p50(port, index, 1)
                await asyncio.sleep(max(0.0, min(1.0, idle_s / 4)))

        asyncio.run(keep_active(idle_s * 2 + 70))  # past the idle time and at least one sweep after it
        mostly_idle = rss()
        warm = asyncio.run(sequential_p50(port, 0, samples))
        cold = [asyncio.run(sequential_p50(port, index, 1)) for index in range(count - samples, count)]
    finally:
        process.terminate()
        process.wait(timeout=60)
        shutil.rmtree(directory, ignore_errors=True)
    print(f"| state | gateway RSS MiB | store process RSS MiB |")
    print("| --- | --- | --- |")
    for label, (gateway, store) in (("after start (nothing loaded)", at_start), (f"all {count} active", all_active),
                                    (f"{active} active, {count - active} inactive (released)", mostly_idle)):
        print(f"| {label} | {gateway:.0f} | {store:.0f} |")
    print(f"search p50 of an active tenant: {warm:.1f} ms; first search of an inactive tenant: p50 "
          f"{percentile(cold, 0.5):.1f} ms, p95 {percentile(cold, 0.95):.1f} ms ({len(cold)} tenants)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 2000])
    parser.add_argument("--samples", type=int, default=50, help="sequential searches per p50")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--states", type=int, default=None, metavar="N", help="measure tenant states with N tenants")
    parser.add_argument("--chunks", type=int, default=200, help="with --states: chunks per tenant")
    parser.add_argument("--active", type=int, default=20, help="with --states: tenants that stay active")
    parser.add_argument("--idle-s", type=float, default=30.0, help="with --states: GATEWAY_TENANT_IDLE_S")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gateway-tenants-"))
    if args.states is not None:
        states(args.states, args.chunks, args.active, args.idle_s, min(args.samples, 20), work)
        return
    rows = [measure(count, args.samples, args.concurrency, work) for count in args.tenants]
    print("| tenants | ready s | threads at ready / after one search each | RSS MiB at ready / after | "
          "store child RSS MiB | first tenant p50 ms, alone / beside the last | last tenant p50 ms (ratio) | failed |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['tenants']:,} | {row['ready_s']:.1f} | {row['threads_ready']} / {row['threads']} | "
              f"{row['rss_ready']:.0f} / {row['rss']:.0f} | {row['store_rss']:.0f} | {row['lone_p50']:.1f} / "
              f"{row['lone_again_p50']:.1f} | {row['last_p50']:.1f} ({row['last_p50'] / row['lone_again_p50']:.2f}x) | "
              f"{row['failures']} |")


if __name__ == "__main__":
    main()
