"""Small pieces the benchmark scripts share: percentiles, ports, a served gateway, CPU time."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson

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


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants (milvus-lite runs as a child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, []))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and all its descendants (milvus-lite runs as a child)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def waited_seconds(stats: dict[str, tuple[int, int, int]]) -> float:
    """The run delay of every thread in a `thread_schedstats` snapshot, in seconds."""
    return sum(wait for _, wait, _ in stats.values()) / 1e9


def thread_schedstats(pid: int) -> dict[str, tuple[int, int, int]]:
    """Per group of threads of a process and its descendants: nanoseconds run, nanoseconds runnable
    but waiting for a CPU, and times scheduled (/proc/PID/task/TID/schedstat). A group is the process
    (`root` for `pid` itself, `child` for a descendant, e.g. milvus-lite's server) and the thread's
    name without its trailing number (`root:gw-worker`, `child:event_engine`); threads alive now only."""
    groups: dict[str, list[int]] = {}
    for member in process_tree(pid):
        role = "root" if member == pid else "child"
        for task in Path(f"/proc/{member}/task").glob("*"):
            try:
                name = (task / "comm").read_text().strip().rstrip("0123456789-_") or "?"
                run, wait, slices = (int(v) for v in (task / "schedstat").read_text().split()[:3])
            except (OSError, ValueError):
                continue
            total = groups.setdefault(f"{role}:{name}", [0, 0, 0])
            total[0], total[1], total[2] = total[0] + run, total[1] + wait, total[2] + slices
    return {group: (run, wait, slices) for group, (run, wait, slices) in groups.items()}


def per_query_threads(before: dict[str, tuple[int, int, int]], after: dict[str, tuple[int, int, int]],
                      queries: int) -> dict[str, list[float]]:
    """`thread_schedstats` deltas as [ms run, ms waited, times scheduled] a query, busiest first."""
    done = max(1, queries)
    rows = {}
    for group, (run, wait, slices) in after.items():
        old = before.get(group, (0, 0, 0))
        rows[group] = [round((run - old[0]) / 1e6 / done, 2), round((wait - old[1]) / 1e6 / done, 2),
                       round((slices - old[2]) / done, 1)]
    return dict(sorted(((g, r) for g, r in rows.items() if r[0] or r[1]), key=lambda item: -item[1][0] - item[1][1]))


class KeepAliveClient:
    """POSTs JSON over kept-alive HTTP/1.1 connections to one loopback server, one request per
    connection at a time: a load generator that shares the cores with what it measures should
    cost as little as it can (httpx took 1.7 ms of CPU a request, this about a fifth of that)."""

    def __init__(self, port: int, headers: dict[str, str], connections: int) -> None:
        self._port = port
        self._head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self._size = connections
        self._opened = 0

    async def post(self, path: str, payload: object) -> tuple[int, object]:
        """(status, decoded JSON body)."""
        body = orjson.dumps(payload)
        reader, writer = await self._connection()
        try:
            writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         f"{self._head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            if "content-length" not in fields:
                raise RuntimeError(f"no Content-Length in the answer ({fields.get('transfer-encoding', '-')})")
            data = await reader.readexactly(int(fields["content-length"]))
        except BaseException:
            writer.close()
            self._opened -= 1
            raise
        self._idle.put_nowait((reader, writer))
        return status, orjson.loads(data)

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._idle.empty() and self._opened < self._size:
            self._opened += 1
            try:
                return await asyncio.open_connection("127.0.0.1", self._port)
            except BaseException:
                self._opened -= 1
                raise
        return await self._idle.get()

    async def close(self) -> None:
        while not self._idle.empty():
            _, writer = self._idle.get_nowait()
            writer.close()
