"""Shared fixtures: the real bundled model, real milvus-lite directories, a real milvus-lite server."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.embedding.base import CachedEmbedder
from gateway.embedding.bundled import BundledEmbedder
from gateway.storage.milvus import MilvusStore
from gateway.tenancy.config import CollectionConfig, TrustTier
from gateway.tenancy.registry import CollectionRef
from gateway.storage.schema import Scope
from dataclasses import dataclass

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def embedder() -> CachedEmbedder:
    return CachedEmbedder(BundledEmbedder(batch_size=8), size=256)


@pytest.fixture(scope="module")
def lite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusStore]:
    store = MilvusStore(str(tmp_path_factory.mktemp("milvus") / "gateway.db"))
    yield store
    store.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `milvus-lite server` on loopback; yields its URI."""
    data_dir = tmp_path_factory.mktemp("milvus-server")
    executable = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    for _ in range(3):  # the free port can be taken between probing and binding
        port = _free_port()
        process = subprocess.Popen(
            [executable, "server", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if _wait_listening(process, port):
            break
        process.kill()
        process.wait()
    else:
        pytest.fail("milvus-lite server did not start on loopback")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGINT)  # SIGINT closes the engine cleanly; SIGTERM does not
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(process: subprocess.Popen, port: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            time.sleep(0.1)
            return process.poll() is None
        except OSError:
            time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def server_store(milvus_server: str) -> Iterator[MilvusStore]:
    store = MilvusStore(milvus_server)
    yield store
    store.close()


def make_ref(tenant: str = "acme", namespace: str = "docs", collection: str = "guides",
             **config: object) -> CollectionRef:
    config.setdefault("trust_tier", TrustTier.FIRST_PARTY)
    return CollectionRef(Scope(tenant, namespace, collection), CollectionConfig(**config))  # type: ignore[arg-type]


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
    app: object

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
    from tests.serving import serve  # tests/serving.py imports this module

    settings = Settings(milvus_uri=str(tmp_path_factory.mktemp("gw") / "gateway.db"),
                        tenants_dir=ROOT / "tenants", max_body_bytes=64 * 1024)
    with serve(settings) as served:
        yield served
