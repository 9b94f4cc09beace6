"""Serve a real gateway (uvicorn on loopback) with custom settings and tenant files, for one module."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.app import create_app
from gateway.routing.searcher import Searcher
from gateway.settings import Settings
from tests.conftest import ROOT, Gateway, _free_port


def tenants_with(directory: Path, extra: dict[str, str]) -> Path:
    """A copy of the demo tenants with YAML text appended to some files (tenant id -> text)."""
    target = directory / "tenants"
    shutil.copytree(ROOT / "tenants", target)
    for tenant, text in extra.items():
        with (target / f"{tenant}.yaml").open("a") as handle:
            handle.write("\n" + text + "\n")
    return target


@contextmanager
def serve(settings: Settings) -> Iterator[Gateway]:
    exporter = InMemorySpanExporter()
    app = create_app(settings, span_processor=SimpleSpanProcessor(exporter))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=_free_port(), log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("gateway did not start")
        time.sleep(0.05)
    try:
        yield Gateway(f"http://127.0.0.1:{server.config.port}", exporter, app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)



@contextmanager
def serve_limited(directory: Path) -> Iterator[Gateway]:
    """The demo tenants, without seeding: acme may send two requests, then one every 100 s (and at
    most 5,000 cost units each); globex keeps the defaults but has a deadline it cannot meet."""
    tenants = tenants_with(directory, {"acme": "limits: {burst: 2, rate: 0.01, max_cost: 5000}",
                                       "globex": "limits: {deadline_ms: 1}"})
    with serve(Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=tenants,
                        ingest_demo_on_start=False)) as gateway:
        yield gateway


LISTED = "query Listed { collections { name } }"


@contextmanager
def serve_listed(directory: Path) -> Iterator[Gateway]:
    """The demo tenants without seeding; globex accepts only LISTED (its manifest), acme is open."""
    import json

    from gateway.graphql.persisted import sha256_hex

    tenants = tenants_with(directory, {"globex": "operations: {manifest: globex-operations.json, "
                                                 "allow_only_listed: true}"})
    (tenants / "globex-operations.json").write_text(json.dumps({sha256_hex(LISTED): LISTED}))
    with serve(Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=tenants,
                        ingest_demo_on_start=False)) as gateway:
        yield gateway


def slow_routing(monkeypatch: pytest.MonkeyPatch, seconds: float = 0.005) -> None:
    """Routing takes `seconds`, so a 1 ms deadline has surely passed when blocking work would start
    (without it the first job may start within the millisecond and the search simply succeed)."""
    original = Searcher.plan

    def plan(self, *args, **kwargs):
        time.sleep(seconds)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Searcher, "plan", plan)


def wait_ready(url: str, process: subprocess.Popen, timeout_s: float = 240) -> None:
    """Until `gateway serve` (a child process) answers /readyz with 200; fails if it exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, process.stderr.read() if process.stderr else "gateway serve exited"
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"gateway serve did not become ready in {timeout_s:.0f} s"
        time.sleep(0.3)
