"""Where a served gateway's time goes under load: a py-spy sample of every thread, summarised.

Starts `gateway serve` on the throughput benchmark's store (run `throughput.py` once first to
build it), sends the full-selection search (`--ids`: ids and scores only) at a fixed concurrency
for `--seconds`, samples every thread of the gateway process with py-spy (`pip install py-spy`;
it is not a dependency), and prints (1) CPU per query of the gateway process and of its
milvus-lite child, and per kind of thread, (2) the share of the threads' non-waiting samples per
part of the request, by the innermost frame's source file (self time), and (3) the innermost
frames with most samples. Samples count a thread that holds or waits for the GIL as busy, so the
shares are of thread time, not of CPU; `--gil` samples only the thread holding the GIL (where
the interpreter's time goes, including stalls while the holder is descheduled).

    python benchmarks/profile_gateway.py --queries $SCIFACT/queries.jsonl --work /tmp/throughput
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402
from common import free_port, start_gateway, tree_cpu_seconds  # noqa: E402

# Where a sample's own time goes: its innermost frame's source file decides (self time). The
# first pattern that matches wins, so a gateway frame that calls into a library is only counted
# when the sample is in the gateway's own code. py-spy leaves out threads the OS sees waiting
# (epoll, a futex, a socket read), so what is left is threads that ran or were runnable.
PARTS = (("query embedding (onnxruntime, tokenizer)", re.compile(r"onnxruntime/|tokenizers|gateway/embedding/")),
         ("pymilvus / gRPC client", re.compile(r"pymilvus/|grpc/|google/protobuf/")),
         ("JSON", re.compile(r"orjson|json/|\bujson")),
         ("graphql-core (parse, validate, execute)", re.compile(r"\(graphql/")),
         ("Strawberry (HTTP view, schema, extensions)", re.compile(r"strawberry/|cross_web/")),
         ("HTTP server (uvicorn, starlette, access log)",
          re.compile(r"uvicorn/|starlette/|h11/|httptools|gateway/(responses|cors)\.py|gateway/telemetry/access")),
         ("OpenTelemetry spans", re.compile(r"opentelemetry/|gateway/telemetry/")),
         ("GraphQL types, completion, cost (gateway/graphql)", re.compile(r"gateway/graphql/")),
         ("admission and request workers", re.compile(r"gateway/admission/")),
         ("searcher, retrieval, fusion, provenance", re.compile(r"gateway/(routing|retrieval|storage|tenancy)/")),
         ("event loop and threads (asyncio, uvloop, threading, concurrent)",
          re.compile(r"asyncio/|uvloop|threading\.py|concurrent/|contextvars")),
         ("other gateway code", re.compile(r"gateway/")))
OTHER = "other (libraries, interpreter)"


def thread_cpu_seconds(pid: int) -> collections.Counter[str]:
    """CPU seconds per kind of thread, by the OS names the gateway gives them (gateway/admission/
    threads.py): gw-worker-N (request workers), gw-onnx (the model's pool); the server's loop and
    other threads keep the process's name."""
    ticks = os.sysconf("SC_CLK_TCK")
    kinds: collections.Counter[str] = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        kind = next((k for k in ("gw-worker", "gw-onnx") if name.startswith(k)), f"other ({name})")
        fields = stat.rsplit(")", 1)[1].split()
        kinds[kind] += (int(fields[11]) + int(fields[12])) / ticks
    return kinds


def own_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(port: int, items: list, concurrency: int, seconds: float, spy: list[str],
               document: str) -> tuple[int, float, float]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120,
                                 headers={"Authorization": f"Bearer {throughput.KEY}"}) as client:
        async def one(text: str) -> list[str]:
            body = (await client.post("/graphql", json={"query": document, "variables": {"q": text}})).json()
            if "errors" in body:
                raise RuntimeError(body["errors"][0]["message"])
            return []

        await throughput.bounded(items[:10], concurrency, one)
        sampler = subprocess.Popen(spy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = int(spy[spy.index("--pid") + 1])
        own, tree, done, start = own_cpu_seconds(pid), tree_cpu_seconds(pid), 0, time.monotonic()
        threads = thread_cpu_seconds(pid)
        while time.monotonic() - start < seconds:
            await throughput.bounded(items, concurrency, one)
            done += len(items)
        own, tree = own_cpu_seconds(pid) - own, tree_cpu_seconds(pid) - tree
        threads = thread_cpu_seconds(pid) - threads
        sampler.wait()
        return done, own, tree - own, threads


def summarise(raw: Path) -> list[tuple[str, float]]:
    shares: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue  # a stack py-spy read while the thread changed it (--nonblocking)
        leaf = stack.split(";")[-1]
        shares[next((name for name, pattern in PARTS if pattern.search(leaf)), OTHER)] += int(count)
    total = sum(shares.values()) or 1
    return [(part, 100 * count / total) for part, count in shares.most_common()]


def top_frames(raw: Path, count: int = 25) -> list[tuple[str, float]]:
    """The innermost frames with the most samples (self time), as shares of all samples."""
    frames: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if samples.isdigit():
            frames[stack.split(";")[-1]] += int(samples)
    total = sum(frames.values()) or 1
    return [(frame, 100 * n / total) for frame, n in frames.most_common(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gateway-throughput"))
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=25)
    parser.add_argument("--ids", action="store_true", help="select ids and scores only (default: the full selection)")
    parser.add_argument("--gil", action="store_true",
                        help="sample only the thread holding the GIL (where the interpreter's time goes)")
    args = parser.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy")
    if not (args.work / "store").exists():
        raise SystemExit(f"no store under {args.work}: run benchmarks/throughput.py with --work {args.work} first")
    items = throughput.queries(args.queries, 300)
    port = free_port()
    server = start_gateway(throughput.environment(args.work, False), port)
    raw = args.work / "profile.txt"
    spy = [pyspy, "record", "--pid", str(server.pid), "--format", "raw", "--threads", "--nonblocking",
           *(["--gil"] if args.gil else []),
           "--rate", "200", "--duration", str(int(args.seconds)), "-o", str(raw)]
    try:
        done, own, child, threads = asyncio.run(load(port, items, args.concurrency, args.seconds + 1, spy,
                                                     throughput.IDS if args.ids else throughput.FULL))
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(f"{done} queries at concurrency {args.concurrency}; CPU ms per query: gateway process "
          f"{1000 * own / done:.1f}, milvus-lite child {1000 * child / done:.1f}")
    for kind, seconds in threads.most_common():
        print(f"  {kind}: {1000 * seconds / done:.2f} ms per query")
    for part, share in summarise(raw):
        print(f"{share:5.1f}%  {part}")
    print("innermost frames:")
    for frame, share in top_frames(raw):
        print(f"{share:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
