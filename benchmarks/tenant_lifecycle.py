"""Tenant lifecycle at scale: start-up with N tenant files (wall and CPU), the registry poll's cost,
and how fast a key added and revoked through one worker reaches the others.

(benchmarks/tenants.py measures what idle tenants cost a serving process: threads, memory, latency.)

Start-up: writes N generated tenant files (one key, one sparse collection each) to a temp
directory, starts `gateway serve` on a fresh milvus-lite store (no seeding), and reports the
seconds from the process start to the first /readyz 200, the CPU seconds the process and the
tenant-file parsers it started used by then, and its peak RSS. With --restart, each is started a second time on the same files and
store (unchanged files are then not parsed again, only validated). The
phases of start-up are in the gateway's log (--log shows it).

Poll: with M API tenants in the store, the time of one TenantSync.poll() (read the versions
written since the last poll, rescan the tenants directory) when nothing changed.

Revocation (--revocation): `gateway serve --workers 2`; a key added and then revoked through
one worker, and how long any worker still accepts it.

    python benchmarks/tenant_lifecycle.py --tenants 2000 20000 --poll-tenants 0 1000 --revocation
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

FILE = """id: {id}
api_keys:
  - {{sha256: "{digest}", role: reader}}
namespaces:
  docs:
    collections:
      faq: {{trust_tier: first-party, mode: sparse}}
"""


def write_tenants(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        tenant_id = f"t{i:05d}"
        digest = hashlib.sha256(f"key-{tenant_id}".encode()).hexdigest()
        (directory / f"{tenant_id}.yaml").write_text(FILE.format(id=tenant_id, digest=digest))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def time_to_ready(count: int, work: Path, show_log: bool) -> tuple[float, float, float]:
    """(seconds to the first /readyz 200, CPU seconds the process used by then, its peak RSS MiB).

    On a shared machine the wall time grows with the load; the CPU seconds do not."""
    tenants = work / f"tenants-{count}"
    if not tenants.exists():  # a second call is a restart: the same files and store
        write_tenants(tenants, count)
    port = _free_port()
    env = {**os.environ, "GATEWAY_TENANTS_DIR": str(tenants), "GATEWAY_MILVUS_URI": str(work / f"store-{count}.db"),
           "GATEWAY_INGEST_DEMO_ON_START": "false", "GATEWAY_PORT": str(port), "GATEWAY_LITE_SERVER": "false"}
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"gateway exited: {process.stdout.read()[-3000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=120).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        rss = _rss_mib(process.pid)
        cpu = _cpu_s(process.pid)
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    if show_log:
        print(output[-4000:])
    return elapsed, cpu, rss


def _cpu_s(pid: int) -> float:
    """CPU seconds of the process and of its children it has waited for (the tenant file parsers)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def poll_cost(api_tenants: int, work: Path, rounds: int = 50) -> tuple[float, float]:
    """(median ms, p90 ms) of one sync round with `api_tenants` in the store and 2 tenant files."""
    from gateway.storage.milvus import MilvusStore
    from gateway.tenancy.auth import ApiKeyAuthenticator
    from gateway.tenancy.persisted import TenantStore
    from gateway.tenancy.platform import Platform
    from gateway.tenancy.registry import TenantRegistry
    from gateway.tenancy.watch import TenantSync

    tenants = work / f"poll-files-{api_tenants}"
    write_tenants(tenants, 2)
    store = MilvusStore(str(work / f"poll-{api_tenants}.db"))
    try:
        registry = TenantRegistry({})
        platform = Platform(registry, TenantStore(store), store, ApiKeyAuthenticator(registry, {}))
        for i in range(api_tenants):
            platform.create({"id": f"api{i:05d}", "namespaces": {"docs": {"collections": {
                "faq": {"trust_tier": "partner"}}}}})
        reader = TenantRegistry({})
        # The reader's clock is 10 minutes ahead: the steady state, no tenant written lately (the
        # markers of the writes above are past persisted.MARKER_READ_MS).
        sync = TenantSync(reader, tenants, store=TenantStore(store, clock=lambda: time.time() + 600))
        sync.load_store()
        assert len(reader) == api_tenants, (len(reader), api_tenants)
        sync.poll()  # the files, once
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            sync.poll()
            times.append((time.perf_counter() - started) * 1000)
    finally:
        store.close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def revocation(work: Path, workers: int = 2, window_s: float = 4.0) -> tuple[float, float, int]:
    """`gateway serve --workers N`: create a tenant and key through one worker, revoke the key, and
    send requests with it for `window_s`. Returns (seconds until the key is accepted by every
    answer after its creation, seconds after the revocation of the last answer that still accepted
    it, requests sent after the revocation). Answers come from whichever worker the kernel hands
    the connection to. "Accepted" is any answer but 401."""
    platform_key = "bench-platform-key"
    tenants = work / "revocation-files"
    write_tenants(tenants, 2)
    port = _free_port()
    env = {**os.environ, "GATEWAY_TENANTS_DIR": str(tenants), "GATEWAY_MILVUS_URI": str(work / "revocation.db"),
           "GATEWAY_INGEST_DEMO_ON_START": "false", "GATEWAY_PORT": str(port),
           "GATEWAY_PLATFORM_KEY_SHA256": hashlib.sha256(platform_key.encode()).hexdigest()}
    process = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--workers", str(workers)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/graphql"

    def platform(query: str, variables: dict) -> dict:
        body = httpx.post(url, json={"query": query, "variables": variables}, timeout=60,
                          headers={"Authorization": f"Bearer {platform_key}"}).json()
        assert "errors" not in body, body
        return body["data"]

    def accepted(key: str) -> bool:
        # A fresh connection each time, so that the kernel may hand it to any worker.
        with httpx.Client() as client:
            return client.post(url, json={"query": "{ collections { name } }"}, timeout=60,
                               headers={"Authorization": f"Bearer {key}"}).status_code != 401

    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=60).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("gateway did not become ready")
            time.sleep(0.1)
        time.sleep(2)  # every worker up
        platform("mutation($c: JSON!) { createTenant(config: $c) { id } }", {"c": {
            "id": "revoked", "namespaces": {"docs": {"collections": {"faq": {"trust_tier": "partner"}}}}}})
        added = platform('mutation { addApiKey(tenant: "revoked") { id key } }', {})["addApiKey"]
        created = time.monotonic()
        consecutive = 0
        while consecutive < 20:  # twenty answers in a row accept it
            consecutive = consecutive + 1 if accepted(added["key"]) else 0
        known_after = time.monotonic() - created
        platform("mutation($k: String!) { revokeApiKey(tenant: \"revoked\", keyId: $k) { id } }", {"k": added["id"]})
        revoked = time.monotonic()
        last_accepted, sent = 0.0, 0
        while time.monotonic() - revoked < window_s:
            sent += 1
            if accepted(added["key"]):
                last_accepted = time.monotonic() - revoked
        return known_after, last_accepted, sent
    finally:
        process.terminate()
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, nargs="*", default=[2000, 20000])
    parser.add_argument("--poll-tenants", type=int, nargs="*", default=[0, 1000])
    parser.add_argument("--restart", action="store_true",
                        help="start each gateway a second time on the same files and store")
    parser.add_argument("--revocation", action="store_true",
                        help="measure key creation and revocation across `serve --workers 2`")
    parser.add_argument("--log", action="store_true", help="print the end of each gateway's log")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gateway-tenants-"))
    try:
        for count in args.tenants:
            for run in ("first start", "restart") if args.restart else ("first start",):
                seconds, cpu, rss = time_to_ready(count, work, args.log)
                print(f"{run}, {count:>6} tenant files: ready in {seconds:6.2f} s ({cpu:5.2f} s CPU), "
                      f"peak RSS {rss:7.1f} MiB, load average {os.getloadavg()[0]:.1f}", flush=True)
        for count in args.poll_tenants:
            median, p90 = poll_cost(count, work)
            print(f"poll, {count:>6} API tenants in the store: median {median:6.2f} ms, p90 {p90:6.2f} ms", flush=True)
        if args.revocation:
            known, refused, sent = revocation(work)
            print(f"serve --workers 2: a new key accepted by 20 answers in a row {known:.2f} s after addApiKey; "
                  f"after revokeApiKey the last answer accepting it came at {refused:.2f} s ({sent} requests in 4 s)",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"peak RSS of this script: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
