"""What lifecycle hooks cost a search: the same searches with hooks off, and on with a webhook that hangs.

In-process `Searcher` over one custom-retriever collection (an in-memory lookup defined here), so
the search itself is cheap and any cost of emitting events shows. Two tenants with the same
collection: `quiet` has no hooks; `loud` has a Python subscriber and a webhook whose loopback
receiver never answers (the worst case: its queue fills and every later event is dropped). The
configurations run interleaved, `--rounds` times `--searches` each, and the summary gives the
median per-search time of each and the ratio loud / quiet.

    nice -n 5 python benchmarks/hooks_overhead.py --rounds 5 --searches 400
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gateway.retrieval.custom import RetrievedChunk, RetrieverRequest
from gateway.routing.searcher import Searcher, SearchRequest
from gateway.settings import Settings
from gateway.storage.milvus import MilvusStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry

ANSWERS = [RetrievedChunk(f"faq/{i}", "0", f"answer number {i} about topic {i % 7}", score=1 / (i + 1))
           for i in range(20)]


def lookup(request: RetrieverRequest) -> list[RetrievedChunk]:
    return ANSWERS[:request.limit]


def ignore(event: dict) -> None:
    pass


def tenant(tenant_id: str, hooks: dict) -> TenantConfig:
    return TenantConfig.model_validate({
        "id": tenant_id, "hooks": hooks,
        "namespaces": {"help": {"collections": {"faq": {"trust_tier": "partner", "retriever": "__main__:lookup"}}}}})


def hanging_receiver(release: threading.Event) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            release.wait()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def timed(searcher: Searcher, tenant_id: str, count: int) -> list[float]:
    principal = Principal(tenant_id, Role.READER)
    out = []
    for i in range(count):
        started = time.perf_counter()
        await searcher.search(principal, SearchRequest(f"topic {i % 7}", collection="faq", limit=10))
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--searches", type=int, default=400)
    args = parser.parse_args()
    release = threading.Event()
    receiver = hanging_receiver(release)
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hooks"
    registry = TenantRegistry({
        "quiet": tenant("quiet", {}),
        "loud": tenant("loud", {"subscribers": ["__main__:ignore"],
                                "webhook": {"url": url, "timeout_ms": 60_000, "retries": 0}, "queue_size": 1000})})
    with tempfile.TemporaryDirectory() as directory:
        store = MilvusStore(str(Path(directory) / "bench.db"))
        searcher = Searcher(registry, store, None, Settings())
        samples: dict[str, list[float]] = {"quiet": [], "loud": []}

        async def run() -> None:
            await timed(searcher, "quiet", 50)  # warm-up
            await timed(searcher, "loud", 50)
            for _ in range(args.rounds):
                for tenant_id in ("quiet", "loud"):
                    samples[tenant_id].extend(await timed(searcher, tenant_id, args.searches))

        asyncio.run(run())
        stats = searcher.hooks.stats()
        medians = {t: statistics.median(v) * 1e6 for t, v in samples.items()}
        print(json.dumps({
            "searches_each": len(samples["quiet"]),
            "median_us": {t: round(m, 1) for t, m in medians.items()},
            "ratio_loud_over_quiet": round(medians["loud"] / medians["quiet"], 3),
            "webhook": dataclasses.asdict(stats[("loud", "webhook")]),
            "subscribers_delivered": stats[("loud", "subscribers")].delivered,
        }))
        release.set()
        searcher.close()
        store.close()
        receiver.shutdown()


if __name__ == "__main__":
    main()
