"""QPS and p50/p95 at concurrency 8: one embedded process beside 1, 2 and 4 workers on one store.

Builds a 1,000-document slice of SciFact in a temp directory (`gateway ingest`, embedded), copies
it for the embedded gateway, and starts four real gateways on loopback at once:

  embedded   `gateway serve` with GATEWAY_LITE_SERVER=false: milvus-lite inside the one process
  workers=1  `gateway serve --workers 1`: starts the supervised milvus-lite server for the store
  workers=2  `gateway serve --workers 2`: finds that server and shares it
  workers=4  `gateway serve --workers 4`: the same

Phase 1 measures each for --seconds, round-robin, --rounds times (interleaved, so the shared
machine's noise falls on all of them alike). Phase 2 measures each while 1,000 more documents
are ingested into a fresh collection of the same store: by a `gateway ingest` process for the
worker gateways (what item 1 makes possible), and through `upsertDocuments` batches of 50 for
the embedded one (the only way to write to a store one process holds; --upsert-batch documents
a call). Every non-200 answer or
GraphQL error counts as an error. Admission rate limits are raised so that they do not cap QPS;
the per-process concurrency limits stay at their defaults (they are what N workers multiply).

    nice -n 5 .venv/bin/python benchmarks/workers.py --scifact $SCIFACT --rounds 2 --seconds 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = 8
SEARCH = 'query($q: String!) { search(input: {query: $q, namespace: "scifact", collection: "corpus"}) { hits { chunk { sourceId } } } }'
UPSERT = ('mutation($c: String!, $docs: [DocumentInput!]!) { upsertDocuments(namespace: "scifact", collection: $c, '
          'documents: $docs) { chunksWritten } }')
READER, WRITER = "bench-reader", "bench-writer"
TENANT = """id: bench
api_keys:
  - {{sha256: "{reader}", role: reader}}
  - {{sha256: "{writer}", role: writer}}
namespaces:
  scifact:
    collections:
      corpus: {{trust_tier: third-party, mode: hybrid, fusion: rrf, limit: 10}}
{ingest}
"""
CONFIGS = ("embedded", "workers=1", "workers=2", "workers=4")


@dataclass
class Window:
    latencies_ms: list[float] = field(default_factory=list)
    codes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def errors(self) -> int:
        return sum(self.codes.values())

    def failed(self, code: str) -> None:
        self.codes[code] = self.codes.get(code, 0) + 1

    def add(self, other: Window) -> None:
        self.latencies_ms += other.latencies_ms
        for code, count in other.codes.items():
            self.codes[code] = self.codes.get(code, 0) + count
        self.seconds += other.seconds

    def summary(self) -> dict[str, object]:
        lat = sorted(self.latencies_ms)
        pct = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1)) if lat else (lambda q: None)
        return {"requests": len(lat) + self.errors, "errors": self.errors, "error_codes": dict(self.codes),
                "qps": round(len(lat) / self.seconds, 1) if self.seconds else None,
                "p50_ms": round(statistics.median(lat), 1) if lat else None, "p95_ms": pct(0.95)}


def _slice(scifact: Path, work: Path, docs: int, ingest_docs: int) -> tuple[Path, Path, list[str]]:
    corpus, extra = work / "corpus.jsonl", work / "ingest.jsonl"
    with (scifact / "corpus.jsonl").open() as source, corpus.open("w") as first, extra.open("w") as second:
        for n, line in enumerate(itertools.islice(source, docs + ingest_docs)):
            (first if n < docs else second).write(line)
    with (scifact / "queries.jsonl").open() as handle:
        queries = [json.loads(line)["text"] for line in itertools.islice(handle, 300)]
    return corpus, extra, queries


def _gateway(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(Path(sys.executable).parent / "gateway"), *args], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def _wait_ready(url: str, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gateway for {url} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"gateway at {url} did not become ready")


async def _load(url: str, queries: list[str], seconds: float | None, stop: threading.Event | None) -> Window:
    """CONCURRENCY clients searching without pause, for `seconds` or until `stop` is set."""
    window = Window()
    counter = itertools.count()
    started = time.monotonic()
    end = started + seconds if seconds is not None else float("inf")

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     headers={"Authorization": f"Bearer {READER}"}) as http:
            while time.monotonic() < end and not (stop is not None and stop.is_set()):
                query = queries[next(counter) % len(queries)]
                t = time.perf_counter()
                try:
                    response = await http.post("/graphql", json={"query": SEARCH, "variables": {"q": query}})
                    body = response.json()
                    code = (None if response.status_code == 200 and "errors" not in body
                            else body["errors"][0].get("extensions", {}).get("code", "?") if body.get("errors")
                            else f"http {response.status_code}")
                except (httpx.HTTPError, ValueError) as exc:
                    code = type(exc).__name__
                if code is None:
                    window.latencies_ms.append((time.perf_counter() - t) * 1000)
                else:
                    window.failed(code)

    await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    window.seconds = time.monotonic() - started
    return window


def _ingest_cli(env: dict[str, str], collection: str, path: Path) -> tuple[bool, str]:
    done = subprocess.run([str(Path(sys.executable).parent / "gateway"), "ingest", "--tenant", "bench",
                           "--namespace", "scifact", "--collection", collection, str(path), "--json"],
                          env=env, capture_output=True, text=True, timeout=1800)
    return done.returncode == 0, (done.stdout or done.stderr).strip()[-300:]


def _ingest_http(url: str, collection: str, path: Path, batch: int) -> tuple[bool, str]:
    """`upsertDocuments` in batches; a failed batch is counted and the rest still sent."""
    docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    written, failed = 0, {}
    with httpx.Client(base_url=url, timeout=600, headers={"Authorization": f"Bearer {WRITER}"}) as http:
        for start in range(0, len(docs), batch):
            part = [{"sourceId": d["_id"], "title": d.get("title", ""), "text": d["text"]}
                    for d in docs[start:start + batch]]
            body = http.post("/graphql", json={"query": UPSERT, "variables": {"c": collection, "docs": part}}).json()
            if "errors" in body:
                code = body["errors"][0].get("extensions", {}).get("code", "?")
                failed[code] = failed.get(code, 0) + len(part)
            else:
                written += body["data"]["upsertDocuments"]["chunksWritten"]
    return not failed, f"chunks_written={written} documents_failed={failed}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scifact", type=Path, default=Path(os.environ.get("SCIFACT", "data/scifact")),
                        help="a BEIR SciFact directory (corpus.jsonl, queries.jsonl); default $SCIFACT")
    parser.add_argument("--docs", type=int, default=1000, help="documents served (default 1000)")
    parser.add_argument("--ingest-docs", type=int, default=1000, help="documents ingested in phase 2 (default 1000)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per measurement window")
    parser.add_argument("--skip-ingest", action="store_true", help="phase 1 only")
    parser.add_argument("--upsert-batch", type=int, default=10,
                        help="documents per upsertDocuments call for the embedded gateway (default 10: "
                             "a call must finish within the 15 s deadline on a busy machine)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="workers-bench-"))
    processes: list[subprocess.Popen] = []
    try:
        corpus, extra, queries = _slice(args.scifact, work, args.docs, args.ingest_docs)
        tenants = work / "tenants"
        tenants.mkdir()
        ingest_collections = "\n".join(f"      ingest_{n}: {{trust_tier: third-party, mode: hybrid, fusion: rrf, limit: 10}}"
                                       for n in range(len(CONFIGS)))
        (tenants / "bench.yaml").write_text(TENANT.format(
            reader=hashlib.sha256(READER.encode()).hexdigest(), writer=hashlib.sha256(WRITER.encode()).hexdigest(),
            ingest=ingest_collections))
        shared, embedded = work / "data" / "gateway.db", work / "data" / "embedded.db"
        base_env = {**os.environ, "GATEWAY_TENANTS_DIR": str(tenants), "GATEWAY_INGEST_DEMO_ON_START": "false",
                    "GATEWAY_TENANT_RATE": "100000", "GATEWAY_TENANT_BURST": "100000",
                    "GATEWAY_TENANT_COST_RATE": "100000000", "GATEWAY_TENANT_COST_BURST": "100000000"}
        env = {**base_env, "GATEWAY_MILVUS_URI": str(shared)}
        t = time.monotonic()
        ok, out = _ingest_cli(env, "corpus", corpus)
        if not ok:
            raise SystemExit(f"initial ingest failed: {out}")
        setup_ingest_s = time.monotonic() - t
        shutil.copytree(shared, embedded)
        shutil.copy2(work / "data" / "gateway.record.json", work / "data" / "embedded.record.json")

        urls: dict[str, str] = {}
        for name in CONFIGS:
            port = free_port()
            urls[name] = f"http://127.0.0.1:{port}"
            if name == "embedded":
                process = _gateway(["serve", "--port", str(port)],
                                   {**base_env, "GATEWAY_MILVUS_URI": str(embedded), "GATEWAY_LITE_SERVER": "false"},
                                   work / "embedded.log")
            else:
                process = _gateway(["serve", "--port", str(port), "--workers", name.split("=")[1]], env,
                                   work / f"{name}.log")
            processes.append(process)
            _wait_ready(urls[name], process)  # in order: workers=1 starts the server the others share
        for name in CONFIGS:
            asyncio.run(_load(urls[name], queries, 2.0, None))  # warm caches and connections

        idle = {name: Window() for name in CONFIGS}
        for _ in range(args.rounds):
            for name in CONFIGS:
                idle[name].add(asyncio.run(_load(urls[name], queries, args.seconds, None)))

        busy: dict[str, dict[str, object]] = {}
        if not args.skip_ingest:
            for n, name in enumerate(CONFIGS):
                stop = threading.Event()
                result: dict[str, object] = {}

                def ingest(name: str = name, n: int = n, result: dict = result) -> None:
                    started = time.monotonic()
                    ok, out = (_ingest_http(urls[name], f"ingest_{n}", extra, args.upsert_batch) if name == "embedded"
                               else _ingest_cli(env, f"ingest_{n}", extra))
                    result.update(ok=ok, out=out, seconds=round(time.monotonic() - started, 1))
                    stop.set()

                thread = threading.Thread(target=ingest)
                thread.start()
                window = asyncio.run(_load(urls[name], queries, None, stop))
                thread.join()
                busy[name] = {**window.summary(), "ingest_ok": result["ok"], "ingest_s": result["seconds"],
                              "ingest": result["out"]}
    finally:
        for process in processes:
            process.send_signal(signal.SIGINT)
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)

    report = {"concurrency": CONCURRENCY, "docs": args.docs, "rounds": args.rounds, "seconds": args.seconds,
              "setup_ingest_s": round(setup_ingest_s, 1),
              "idle": {name: w.summary() for name, w in idle.items()}, "during_ingest": busy}
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
    return 0 if all(w.errors == 0 for w in idle.values()) and all(
        b["errors"] == 0 and b["ingest_ok"] for b in busy.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
