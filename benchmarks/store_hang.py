"""A hung milvus-lite server (SIGSTOP) under a serving gateway: how long requests and /readyz take.

Starts the supervised milvus-lite server for a fresh store and a gateway on it in this process
(demo tenants, seeded), stops the server with SIGSTOP, then times a search already sent when the
hang starts, and then --probes rounds of /readyz plus a search. Then it sends SIGCONT and times
the first successful search. Bounded: the seed, plus a few seconds.

    .venv/bin/python benchmarks/store_hang.py --probes 3
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # the child's

from gateway.settings import Settings  # noqa: E402
from gateway.storage.record import StorePaths  # noqa: E402
from gateway.storage.server import SupervisedServer  # noqa: E402
from tests.serving import serve  # noqa: E402

SEARCH = '{ search(input: {query: "teleporter calibration drift", collection: "tickets", mode: SPARSE}) { hits { chunk { sourceId } } } }'
HEADERS = {"Authorization": "Bearer demo-acme-reader"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probes", type=int, default=3)
    args = parser.parse_args()
    paths = StorePaths.of(str(Path(tempfile.mkdtemp(prefix="store-hang-")) / "gateway.db"))
    settings = Settings(milvus_uri=str(paths.store), tenants_dir=ROOT / "tenants", ingest_demo_on_start=True)
    with SupervisedServer(paths) as supervisor, serve(settings) as gateway:
        def search() -> tuple[float, str]:
            started = time.monotonic()
            body = httpx.post(f"{gateway.url}/graphql", json={"query": SEARCH}, headers=HEADERS, timeout=30).json()
            code = body["errors"][0]["extensions"]["code"] if "errors" in body else "OK"
            return time.monotonic() - started, code

        print("search before the hang: %.3f s %s" % search())
        os.kill(supervisor.pid, signal.SIGSTOP)
        try:
            print("search in flight when the hang starts: %.3f s %s" % search())
            for _ in range(args.probes):
                started = time.monotonic()
                status = httpx.get(f"{gateway.url}/readyz", timeout=30).status_code
                print("readyz: %.3f s %d" % (time.monotonic() - started, status))
                print("search: %.3f s %s" % search())
        finally:
            os.kill(supervisor.pid, signal.SIGCONT)
        started = time.monotonic()
        while search()[1] != "OK":
            time.sleep(0.05)
        print("first successful search after SIGCONT: %.3f s" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
