"""What N `GET /mcp` streams opened with one API key cost a real `gateway serve`, and what closing returns.

Starts `gateway serve` on a fresh store in a temp directory (the demo tenants, no seeding), learns
the serving process's pid from /readyz (loopback: the detail), opens N SSE streams with one
reader key, then closes them all, and prints the answers' status codes and the server's RSS and
open file descriptors before, while open, and 3 s after closing.

    .venv/bin/python benchmarks/mcp_streams.py --streams 2000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import KEYS, _free_port  # noqa: E402
from tests.serving import wait_ready  # noqa: E402


def rss_mb_and_fds(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return rss_kb // 1024, len(os.listdir(f"/proc/{pid}/fd"))


async def attack(url: str, pid: int, streams: int) -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    headers = {"Authorization": f"Bearer {KEYS['acme-reader']}", "Accept": "text/event-stream"}
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        before = rss_mb_and_fds(pid)
        opened = []
        for _ in range(streams):
            response = await client.send(client.build_request("GET", f"{url}/mcp", headers=headers), stream=True)
            opened.append(response)
            if response.status_code != 200:
                await response.aread()
        await asyncio.sleep(1)
        during = rss_mb_and_fds(pid)
        for response in opened:
            await response.aclose()
        await asyncio.sleep(3)
        after = rss_mb_and_fds(pid)
    statuses = dict(sorted(Counter(r.status_code for r in opened).items()))
    print(f"{streams} GET /mcp with one key: statuses {statuses}; server RSS MB, fds: before {before}, "
          f"open {during}, 3 s after closing {after}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=2000)
    args = parser.parse_args()
    port = _free_port()
    directory = Path(tempfile.mkdtemp(prefix="mcp-streams-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATEWAY_MILVUS_URI": str(directory / "gateway.db"),
           "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), "GATEWAY_PORT": str(port),
           "GATEWAY_INGEST_DEMO_ON_START": "false"}
    # The access log goes to a file: a pipe nobody reads fills up and stalls the server.
    with open(directory / "serve.log", "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve"], env=env, cwd=ROOT,
                                   stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, process)
            asyncio.run(attack(url, httpx.get(f"{url}/readyz").json()["pid"], args.streams))
        finally:
            process.terminate()
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()
