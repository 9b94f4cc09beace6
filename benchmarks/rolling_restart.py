"""A rolling restart of `gateway serve` on one machine under load: requests failed, longest gap.

What an operator does to upgrade: start the new `gateway serve` next to the running one (another
port, the same milvus-lite store), move traffic to it, stop the old one. The newcomer attaches to
the old one's milvus-lite server, and when the old serve stops it takes over supervision and
starts its own server (gateway/storage/server.py); requests in between wait for it.

Each round: start a new serve, wait for /readyz, put a paced search load on it, stop the old serve
(SIGTERM), keep the load on for --after seconds. Reported per round: requests answered and
failed, the longest single request, and the longest gap (the longest time in which no request
completed successfully). Bounded: about rounds x (start + 1 + stop + after) seconds.

    .venv/bin/python benchmarks/rolling_restart.py --rounds 3 --rate 40 --after 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
UPSERT = """mutation($docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "support", collection: "tickets", documents: $docs) { chunksWritten }
}"""
FIND = '{ search(input: {query: "teleporter calibration", collection: "tickets", mode: SPARSE}) { hits { chunk { sourceId } } } }'
DOC = {"sourceId": "TP-1", "title": "Teleporter calibration", "text": "The teleporter calibration drifted again.",
       "metadata": {"status": "open", "priority": "high", "product": "storage", "year": 2026}}


@dataclass
class LoadReport:
    answered: int
    failed: int
    longest_request_s: float
    longest_gap_s: float
    p50_ms: float
    p99_ms: float
    failures: list[str] = field(default_factory=list)


class Load:
    """`threads` clients that together send `rate` searches a second to `url` until the block ends.

    A request succeeds when it answers 200 without errors and its first hit is `expect`."""

    def __init__(self, url: str, query: str, *, expect: str, rate: float = 40.0, threads: int = 2,
                 key: str = "demo-acme-reader") -> None:
        self._url, self._query, self._expect, self._key = url, query, expect, key
        self._interval = threads / rate
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._results: list[tuple[float, float, bool, str]] = []

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _run(self) -> None:
        with httpx.Client(base_url=self._url, timeout=30, headers={"Authorization": f"Bearer {self._key}"}) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    response = client.post("/graphql", json={"query": self._query})
                    body = response.json()
                    hits = (body.get("data") or {}).get("search", {}).get("hits", []) if "errors" not in body else []
                    ok = response.status_code == 200 and bool(hits) and hits[0]["chunk"]["sourceId"] == self._expect
                    detail = "" if ok else f"{response.status_code} {json.dumps(body)[:300]}"
                except (httpx.HTTPError, ValueError) as exc:
                    ok, detail = False, f"{type(exc).__name__}: {exc}"
                ended = time.monotonic()
                with self._lock:
                    self._results.append((started, ended, ok, detail))
                self._stop.wait(max(0.0, self._interval - (ended - started)))

    def report(self) -> LoadReport:
        with self._lock:
            results = sorted(self._results)
        successes = sorted(ended for _, ended, ok, _ in results if ok)
        # From the first request's start to the last one's end: failures at the end are a gap too.
        marks = [results[0][0], *successes, max(ended for _, ended, _, _ in results)] if results else []
        gaps = [b - a for a, b in zip(marks, marks[1:])]
        latencies = sorted(ended - started for started, ended, _, _ in results)
        return LoadReport(
            answered=len(results), failed=sum(1 for r in results if not r[2]),
            longest_request_s=round(max(latencies, default=0.0), 3), longest_gap_s=round(max(gaps, default=0.0), 3),
            p50_ms=round(statistics.median(latencies) * 1000, 1) if latencies else 0.0,
            p99_ms=round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 1) if latencies else 0.0,
            failures=[detail for _, _, ok, detail in results if not ok])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(env: dict[str, str], port: int, log: Path, workers: int = 1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", str(port),
                             "--workers", str(workers)], env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True)


def _wait_ready(url: str, process: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gateway serve exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} was not ready within {timeout_s:.0f} s")


def _stop(process: subprocess.Popen) -> float:
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return time.monotonic() - started


def run(directory: Path, rounds: int, rate: float, threads: int, after_s: float, workers: int = 1) -> list[dict]:
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(directory / "gateway.db"),
           "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), "GATEWAY_INGEST_DEMO_ON_START": "false",
           "PYTHONPATH": str(ROOT)}
    port = _free_port()
    current = _serve(env, port, directory / "serve-0.log", workers)
    results = []
    try:
        _wait_ready(f"http://127.0.0.1:{port}", current)
        written = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": UPSERT, "variables": {"docs": [DOC]}},
                             headers={"Authorization": "Bearer demo-acme-writer"}, timeout=60).json()
        assert written == {"data": {"upsertDocuments": {"chunksWritten": 1}}}, written
        for round_ in range(1, rounds + 1):
            new_port = _free_port()
            newcomer = _serve(env, new_port, directory / f"serve-{round_}.log", workers)
            _wait_ready(f"http://127.0.0.1:{new_port}", newcomer)
            with Load(f"http://127.0.0.1:{new_port}", FIND, expect="TP-1", rate=rate, threads=threads) as load:
                time.sleep(1.0)
                stop_s = _stop(current)
                time.sleep(after_s)
            report = load.report()
            results.append({"round": round_, "old_serve_stopped_in_s": round(stop_s, 2),
                            **{k: v for k, v in asdict(report).items() if k != "failures"},
                            "first_failures": report.failures[:3]})
            current, port = newcomer, new_port
    finally:
        _stop(current)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40.0, help="searches a second, all clients together")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="worker processes of each gateway serve")
    parser.add_argument("--after", type=float, default=5.0, help="seconds of load after the old serve stopped")
    parser.add_argument("--dir", type=Path, help="where the store goes (default: a new temporary directory)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="rolling-restart-"))
    directory.mkdir(parents=True, exist_ok=True)
    results = run(directory, args.rounds, args.rate, args.threads, args.after, args.workers)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            print(f"round {r['round']}: {r['answered']} requests, {r['failed']} failed, longest gap "
                  f"{r['longest_gap_s']:.2f} s, longest request {r['longest_request_s']:.2f} s, "
                  f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms (old serve stopped in "
                  f"{r['old_serve_stopped_in_s']:.1f} s)")
    return 0 if all(r["failed"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
