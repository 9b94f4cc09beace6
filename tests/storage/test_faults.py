"""Storage faults on a real 16 MiB tmpfs and read-only bind mounts, through the real app and CLI.

Needs root (mount); skipped with the reason elsewhere. Every acknowledged write must survive,
every failure must be STORAGE_UNAVAILABLE (never INTERNAL), /readyz must say 503 with the reason
while the fault lasts and 200 again after it, and damage must be refused without deleting anything.
"""

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.cli import EXIT_STORAGE, main
from gateway.errors import StorageUnavailable
from gateway.runtime import open_store
from gateway.settings import Settings
from gateway.storage.integrity import collection_dirs
from gateway.storage.schema import Scope

KEY = "faults-writer"
TENANT = f"""
id: faults
api_keys: [{{sha256: "{hashlib.sha256(KEY.encode()).hexdigest()}", role: writer}}]
namespaces:
  ns:
    collections:
      docs: {{trust_tier: first-party, mode: hybrid, fusion: rrf, limit: 5}}
"""
SCOPE = Scope("faults", "ns", "docs")
UPSERT = """mutation($docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "ns", collection: "docs", documents: $docs) { sources chunksWritten } }"""
SEARCH = '{ search(input: {query: "fault tolerance", collection: "docs", namespace: "ns"}) { hits { chunk { sourceId } } } }'


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def disk(tmp_path) -> Iterator[Path]:
    """A 16 MiB tmpfs, so a full disk is real and quick to reach."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt))
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"tmpfs mount not permitted here: {exc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """New files under `directory` fail with EROFS (a read-only bind mount over it); open files go on."""
    _mount("--bind", str(directory), str(directory))
    try:
        _mount("-o", "remount,bind,ro", str(directory))
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=True)


@contextmanager
def full(disk: Path) -> Iterator[None]:
    """Fill the tmpfs to the last byte; free it again afterwards."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    try:
        yield
    finally:
        filler.unlink()


def _tenants(tmp_path: Path) -> Path:
    directory = tmp_path / "tenants"
    directory.mkdir(exist_ok=True)
    (directory / "faults.yaml").write_text(TENANT)
    return directory


def _settings(tmp_path: Path, store: Path, **extra) -> Settings:
    return Settings(milvus_uri=str(store), tenants_dir=_tenants(tmp_path), ingest_demo_on_start=False, **extra)


def _docs(start: int, n: int) -> list[dict]:
    return [{"sourceId": f"doc-{i}", "title": f"Doc {i}",
             "text": f"Document {i} is about fault tolerance and durable storage. " * 4}
            for i in range(start, start + n)]


def _post(client: TestClient, query: str, variables: dict | None = None) -> dict:
    response = client.post("/graphql", json={"query": query, "variables": variables or {}},
                           headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code < 500, response.text
    return response.json()


def _code(body: dict) -> str | None:
    return body["errors"][0]["extensions"]["code"] if body.get("errors") else None


def _stored_sources(settings: Settings) -> set[str]:
    store = open_store(settings, dim=384)
    try:
        store.open_existing(SCOPE)
        return {row.source_id for row in store.inventory(SCOPE).values()}
    finally:
        store.close()


def _release(store: Path) -> None:
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(store))


def test_full_disk_while_serving_keeps_every_acknowledged_write(disk, tmp_path):
    settings = _settings(tmp_path, disk / "g.db")
    acknowledged: set[str] = set()
    with TestClient(create_app(settings)) as client:
        first = _post(client, UPSERT, {"docs": _docs(0, 3)})
        assert _code(first) is None
        acknowledged |= {f"doc-{i}" for i in range(3)}
        with full(disk):
            codes = [_code(_post(client, UPSERT, {"docs": _docs(10 + 5 * k, 5)})) for k in range(3)]
            assert set(codes) == {"STORAGE_UNAVAILABLE"}, codes
            ready = client.get("/readyz")
            assert ready.status_code == 503 and "no space left" in ready.json()["reason"]
            assert _code(_post(client, SEARCH)) is None  # reads go on from what is loaded
        assert client.get("/readyz").status_code == 200  # back by itself once there is space
        again = _post(client, UPSERT, {"docs": _docs(100, 2)})
        assert _code(again) is None, again
        acknowledged |= {"doc-100", "doc-101"}
    _release(disk / "g.db")
    assert acknowledged <= _stored_sources(settings)


def test_read_only_store_while_serving_is_unready_then_recovers(disk, tmp_path):
    settings = _settings(tmp_path, disk / "data" / "g.db")
    with TestClient(create_app(settings)) as client:
        assert _code(_post(client, UPSERT, {"docs": _docs(0, 2)})) is None
        with read_only(disk / "data"):
            ready = client.get("/readyz")
            assert ready.status_code == 503 and "read-only file system" in ready.json()["reason"]
            assert _code(_post(client, UPSERT, {"docs": _docs(5, 2)})) == "STORAGE_UNAVAILABLE"
            assert _code(_post(client, SEARCH)) is None  # reads go on
        assert client.get("/readyz").status_code == 200
        assert _code(_post(client, UPSERT, {"docs": _docs(10, 2)})) is None
    _release(disk / "data" / "g.db")
    assert {"doc-0", "doc-1", "doc-10", "doc-11"} <= _stored_sources(settings)


def test_read_only_store_at_start_names_the_file_system(disk, tmp_path):
    settings = _settings(tmp_path, disk / "data" / "g.db")
    store = open_store(settings, dim=384)
    store.close()
    _release(disk / "data" / "g.db")
    with read_only(disk / "data"):
        with pytest.raises(StorageUnavailable, match=r"g\.db is on a read-only file system; .* mount it read-write"):
            open_store(settings, dim=384)


def test_deleted_store_directory_while_serving_is_unready_and_refused_on_restart(disk, tmp_path):
    settings = _settings(tmp_path, disk / "g.db")
    with TestClient(create_app(settings)) as client:
        assert _code(_post(client, UPSERT, {"docs": _docs(0, 2)})) is None
        shutil.rmtree(disk / "g.db")
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "does not exist" in ready.json()["reason"]
        assert _code(_post(client, UPSERT, {"docs": _docs(5, 1)})) == "STORAGE_UNAVAILABLE"
        assert _code(_post(client, SEARCH)) is None  # answered from what is loaded in memory
    _release(disk / "g.db")
    with pytest.raises(StorageUnavailable, match=r"store directory is missing, but the gateway's record"):
        open_store(settings, dim=384)


def test_damaged_manifest_is_refused_by_the_app_and_nothing_is_deleted(disk, tmp_path):
    settings = _settings(tmp_path, disk / "g.db")
    with TestClient(create_app(settings)) as client:
        assert _code(_post(client, UPSERT, {"docs": _docs(0, 3)})) is None
    _release(disk / "g.db")
    chunk_dir = collection_dirs(disk / "g.db")[SCOPE.chunk_collection]
    (chunk_dir / "manifest.json").write_text("garbage")
    files = sorted(str(p) for p in chunk_dir.rglob("*") if p.is_file())
    with pytest.raises(StorageUnavailable, match=r"manifest\.json: is not valid JSON"):
        with TestClient(create_app(settings)):
            pass
    assert sorted(str(p) for p in chunk_dir.rglob("*") if p.is_file()) == files


def test_full_disk_during_cli_ingest_reports_what_was_committed_and_a_rerun_finishes(
        disk, tmp_path, monkeypatch, capsys):
    settings = _settings(tmp_path, disk / "g.db")
    monkeypatch.setenv("GATEWAY_TENANTS_DIR", str(settings.tenants_dir))
    monkeypatch.setenv("GATEWAY_MILVUS_URI", str(settings.milvus_uri))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"a{i}.md").write_text(f"# A{i}\n\nFirst batch document {i} about durable storage.\n")
    target = ["ingest", "--tenant", "faults", "--namespace", "ns", "--collection", "docs", "--json"]
    assert main([*target, str(corpus)]) == 0
    capsys.readouterr()
    for i in range(4):
        (corpus / f"b{i}.md").write_text(f"# B{i}\n\nSecond batch document {i} about full disks.\n")
    with full(disk):
        assert main([*target, str(corpus)]) == EXIT_STORAGE
        out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["error"] == "STORAGE_UNAVAILABLE" and "re-run" in report["next"]
    assert report["committed"][SCOPE.chunk_collection]["rows_before"] == 3
    assert "error [STORAGE_UNAVAILABLE]" in err
    _release(disk / "g.db")
    assert main([*target, str(corpus)]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["sources"] == 7
    _release(disk / "g.db")  # the embedded engine of this process holds the lock until released
    assert main(["verify"]) == 0  # no orphan parents or token vectors left behind
    _release(disk / "g.db")
    assert _stored_sources(settings) == {f"a{i}.md" for i in range(3)} | {f"b{i}.md" for i in range(4)}


def test_app_over_a_milvus_server_is_unready_while_it_is_down_and_recovers(tmp_path):
    from tests.conftest import _free_port
    from tests.storage.test_guard import _server, _stop

    port = _free_port()
    server = _server(port, tmp_path / "server-data")
    settings = Settings(milvus_uri=f"http://127.0.0.1:{port}", tenants_dir=_tenants(tmp_path),
                        token_vectors_dir=tmp_path / "tokens", ingest_demo_on_start=False)
    try:
        with TestClient(create_app(settings)) as client:
            assert _code(_post(client, UPSERT, {"docs": _docs(0, 2)})) is None
            _stop(server)
            ready = client.get("/readyz")
            assert ready.status_code == 503 and "Fail connecting" in ready.json()["reason"]
            assert _code(_post(client, SEARCH)) == "STORAGE_UNAVAILABLE"
            assert _code(_post(client, UPSERT, {"docs": _docs(5, 1)})) == "STORAGE_UNAVAILABLE"
            server = _server(port, tmp_path / "server-data")  # collections come back released
            for _ in range(300):  # the gRPC channel reconnects with back-off
                if client.get("/readyz").status_code == 200:
                    break
                time.sleep(0.05)
            body = _post(client, SEARCH)
            assert _code(body) is None and {h["chunk"]["sourceId"] for h in body["data"]["search"]["hits"]} >= {"doc-0"}
    finally:
        _stop(server)


def test_full_disk_behind_a_milvus_server_is_storage_unavailable_and_loses_nothing(disk, tmp_path):
    from tests.conftest import _free_port
    from tests.storage.test_guard import _server, _stop

    port = _free_port()
    server = _server(port, disk / "server-data")
    settings = Settings(milvus_uri=f"http://127.0.0.1:{port}", tenants_dir=_tenants(tmp_path),
                        token_vectors_dir=tmp_path / "tokens", ingest_demo_on_start=False)
    try:
        with TestClient(create_app(settings)) as client:
            assert _code(_post(client, UPSERT, {"docs": _docs(0, 3)})) is None
            with full(disk):
                codes = {_code(_post(client, UPSERT, {"docs": _docs(10 + 5 * k, 5)})) for k in range(3)}
                assert codes == {"STORAGE_UNAVAILABLE"}
                # No `last_failure` check here: a failed upsert removes the rows it created, and when
                # that small delete commits on the server, the failure is cleared by design.
            assert _code(_post(client, UPSERT, {"docs": _docs(100, 1)})) is None
        _stop(server)
        server = _server(port, disk / "server-data")
        assert {"doc-0", "doc-1", "doc-2", "doc-100"} <= _stored_sources(settings)
    finally:
        _stop(server)
