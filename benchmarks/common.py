"""Small pieces the benchmark scripts share: percentiles, ports, a served gateway, CPU time."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gateway(env: dict[str, str], port: int, *args: str, timeout_s: float = 300) -> subprocess.Popen:
    """`gateway serve` on loopback with these GATEWAY_* variables; returns once /readyz is 200."""
    executable = shutil.which("gateway") or str(Path(sys.executable).parent / "gateway")
    process = subprocess.Popen([executable, "serve", *args],
                               env={**os.environ, "GATEWAY_PORT": str(port), "GATEWAY_HOST": "127.0.0.1", **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("gateway serve exited during start-up")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"gateway did not become ready in {timeout_s:.0f} s")


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and all its descendants (milvus-lite runs as a child)."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        stats[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        total += stats.get(current, 0.0)
        stack.extend(children.get(current, []))
    return total
