"""A real gateway on loopback: uvicorn in a thread, demo tenants seeded into a fresh milvus-lite dir."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.app import create_app
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "acme-reader": "demo-acme-reader",
    "acme-writer": "demo-acme-writer",
    "acme-admin": "demo-acme-admin",
    "globex-reader": "demo-globex-reader",
    "globex-writer": "demo-globex-writer",
}


@dataclass
class Gateway:
    url: str
    spans: InMemorySpanExporter

    def post(self, query: str, variables: dict | None = None, key: str | None = "acme-reader",
             **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {KEYS.get(key, key)}"} if key else {}
        return httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}},
                          headers=headers, timeout=60, **kwargs)

    def data(self, query: str, variables: dict | None = None, key: str = "acme-reader") -> dict:
        body = self.post(query, variables, key).json()
        assert "errors" not in body, body
        return body["data"]

    def error(self, query: str, variables: dict | None = None, key: str = "acme-reader") -> dict:
        body = self.post(query, variables, key).json()
        assert body.get("errors"), body
        return body["errors"][0]


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    exporter = InMemorySpanExporter()
    settings = Settings(milvus_uri=str(tmp_path_factory.mktemp("gw") / "gateway.db"),
                        tenants_dir=ROOT / "tenants", max_body_bytes=64 * 1024)
    app = create_app(settings, span_processor=SimpleSpanProcessor(exporter))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("gateway did not start")
        time.sleep(0.1)
    try:
        yield Gateway(f"http://127.0.0.1:{port}", exporter)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
