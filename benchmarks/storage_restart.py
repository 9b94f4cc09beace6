"""Storage stopped and restarted under load: errors during the outage, time to first success, memory.

A `milvus-lite server` process on loopback stands in for Milvus; `gateway serve` (a real process,
the demo tenants, seeded on start) points at it; client threads search without pause. The
server is stopped (SIGINT, or SIGKILL with --kill), left down for --outage seconds, and started
again on the same port and data directory. Bounded: the whole run takes about
seed + warmup + outage + after seconds.

    .venv/bin/python benchmarks/storage_restart.py --outage 5 --after 10 --clients 4 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ["how do I rotate an access key", "refund for a failed payment", "bucket versioning",
           "outage in eu-west", "data retention policy", "ACME-SVC-503 error"]
SEARCH = "query($q: String!) { search(input: {query: $q, namespace: \"support\"}) { hits { chunk { sourceId } } } }"


@dataclass(frozen=True)
class Sample:
    started: float
    ended: float
    outcome: str  # "ok", an extensions.code, or "http <status>" / an exception name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def _milvus(port: int, data: Path) -> subprocess.Popen:
    executable = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    process = subprocess.Popen([executable, "server", "--host", "127.0.0.1", "--port", str(port),
                                "--data-dir", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not _listening(port, 60):
        process.kill()
        raise SystemExit("milvus-lite server did not start")
    return process


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _client(url: str, stop: threading.Event, samples: list[Sample], index: int) -> None:
    with httpx.Client(timeout=30, headers={"Authorization": "Bearer demo-acme-reader"}) as http:
        n = index
        while not stop.is_set():
            started = time.monotonic()
            try:
                response = http.post(url, json={"query": SEARCH, "variables": {"q": QUERIES[n % len(QUERIES)]}})
                body = response.json() if response.status_code < 500 else {}
                outcome = ("ok" if response.status_code == 200 and not body.get("errors")
                           else body["errors"][0]["extensions"].get("code", "?") if body.get("errors")
                           else f"http {response.status_code}")
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
            samples.append(Sample(started, time.monotonic(), outcome))
            n += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--outage", type=float, default=5.0)
    parser.add_argument("--after", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--kill", action="store_true", help="SIGKILL the server instead of SIGINT")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="storage-restart-"))
    milvus_port, gateway_port = _free_port(), _free_port()
    server = _milvus(milvus_port, work / "milvus")
    env = {**os.environ, "GATEWAY_MILVUS_URI": f"http://127.0.0.1:{milvus_port}",
           "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), "GATEWAY_TOKEN_VECTORS_DIR": str(work / "tokens")}
    gateway = subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve", "--port", str(gateway_port)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{gateway_port}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("gateway did not become ready")
        samples: list[Sample] = []
        stop = threading.Event()
        threads = [threading.Thread(target=_client, args=(f"{base}/graphql", stop, samples, i), daemon=True)
                   for i in range(args.clients)]
        for thread in threads:
            thread.start()
        time.sleep(args.warmup)
        rss_before = _rss_mib(gateway.pid)
        down_at = time.monotonic()
        server.send_signal(signal.SIGKILL if args.kill else signal.SIGINT)
        server.wait(30)
        stopped_at = time.monotonic()
        time.sleep(args.outage)
        restart_at = time.monotonic()
        server = _milvus(milvus_port, work / "milvus")
        listening_at = time.monotonic()
        ready_at = None
        while time.monotonic() < listening_at + args.after:
            if ready_at is None and httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                ready_at = time.monotonic()
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(35)
        rss_after = _rss_mib(gateway.pid)
    finally:
        gateway.send_signal(signal.SIGINT)
        try:
            gateway.wait(30)
        except subprocess.TimeoutExpired:
            gateway.kill()
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)

    before = [s for s in samples if s.ended < down_at]
    during = [s for s in samples if down_at <= s.started < listening_at]
    after = [s for s in samples if s.started >= listening_at]
    first_ok = min((s.ended for s in samples if s.outcome == "ok" and s.started >= restart_at), default=None)

    def outcomes(batch: list[Sample]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for sample in batch:
            counts[sample.outcome] = counts.get(sample.outcome, 0) + 1
        return counts

    def p50_ms(batch: list[Sample]) -> float | None:
        oks = [(s.ended - s.started) * 1000 for s in batch if s.outcome == "ok"]
        return round(statistics.median(oks), 1) if oks else None

    report = {
        "clients": args.clients, "signal": "SIGKILL" if args.kill else "SIGINT",
        "outage_s": round(listening_at - stopped_at, 2),
        "before": {"requests": len(before), "outcomes": outcomes(before), "p50_ms": p50_ms(before)},
        "during_outage": {"requests": len(during), "outcomes": outcomes(during),
                          "max_ms": round(max((s.ended - s.started) * 1000 for s in during), 1) if during else None},
        "after": {"requests": len(after), "outcomes": outcomes(after), "p50_ms": p50_ms(after)},
        "first_success_after_storage_back_s": round(first_ok - listening_at, 3) if first_ok else None,
        "readyz_200_after_storage_back_s": round(ready_at - listening_at, 3) if ready_at else None,
        "rss_mib_before": round(rss_before, 1), "rss_mib_after": round(rss_after, 1),
    }
    print(json.dumps(report, indent=None if args.json else 2))
    return 0 if first_ok is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
