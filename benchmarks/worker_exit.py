"""Seconds from a SIGKILL of `gateway serve --workers 2` until no worker runs and its port binds again.

Each run starts a real `gateway serve --workers 2` on a fresh store in a temp directory (the demo
tenants, no seeding), waits for /readyz, learns both worker pids from /readyz, kills the serve
process with SIGKILL (which it cannot handle) and times how long its workers take to go (they
exit on their own: gateway/lifeline.py) and when the port can be bound again, as the next
`gateway serve` would.

    .venv/bin/python benchmarks/worker_exit.py --runs 3
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def one_run(timeout_s: float = 180) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as work:
        port = _free_port()
        env = {**os.environ, "GATEWAY_MILVUS_URI": str(Path(work) / "g.db"),
               "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), "GATEWAY_INGEST_DEMO_ON_START": "false"}
        serve = subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve", "--workers", "2",
                                  "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        pids: set[int] = set()
        try:
            while len(pids) < 2:
                if time.monotonic() > deadline:
                    raise SystemExit("gateway serve --workers 2 did not answer with both workers in time")
                try:
                    with httpx.Client(base_url=url, timeout=10) as client:  # a fresh connection may reach either
                        answer = client.get("/readyz")
                    if answer.status_code == 200:
                        pids.add(answer.json()["pid"])
                except httpx.HTTPError:
                    time.sleep(0.3)
            serve.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            serve.wait()
            while any(_running(pid) for pid in pids) and time.monotonic() - killed < 60:
                time.sleep(0.02)
            gone = time.monotonic() - killed
            while not _bindable(port) and time.monotonic() - killed < 60:
                time.sleep(0.02)
            return gone, time.monotonic() - killed
        finally:
            for pid in pids:
                if _running(pid):
                    os.kill(pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for run in range(1, args.runs + 1):
        gone, bindable = one_run()
        print(f"run {run}: workers gone after {gone:.2f} s, port bindable after {bindable:.2f} s", flush=True)


if __name__ == "__main__":
    main()
