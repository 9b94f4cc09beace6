"""`gateway serve`'s supervised milvus-lite server: other processes share the store, a dead child comes back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.runtime import open_store
from gateway.settings import Settings
from gateway.storage.backup import BackupError, restore
from gateway.storage.record import StorePaths, read_record
from gateway.storage.server import SupervisedServer, live_server, read_location
from tests.conftest import ROOT
from tests.serving import serve

SEARCH = '{ search(input: {query: "teleporter calibration drift", collection: "tickets", mode: SPARSE}) { hits { chunk { sourceId } } } }'
READER = {"Authorization": "Bearer demo-acme-reader"}


def _settings(paths: StorePaths) -> Settings:
    return Settings(milvus_uri=str(paths.store), tenants_dir=ROOT / "tenants", ingest_demo_on_start=False)


def _release(path: Path) -> None:
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(path))


def _search(url: str) -> dict:
    return httpx.post(f"{url}/graphql", json={"query": SEARCH}, headers=READER, timeout=60).json()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """An embedded store written before serve started (the quick start's ./data/gateway.db), then served."""
    root = tmp_path_factory.mktemp("served")
    paths = StorePaths.of(str(root / "gateway.db"))
    store = open_store(_settings(paths), dim=384)  # embedded: no server runs yet
    assert not store.guard._uri.startswith("http")
    from tests.storage.test_integrity import write_rows

    write_rows(store, n=10)
    store.close()
    _release(paths.store)
    supervisor = SupervisedServer(paths)
    supervisor.start()
    try:
        with serve(_settings(paths)) as gateway:
            yield paths, supervisor, gateway, root
    finally:
        supervisor.stop()


def test_serve_shares_the_existing_embedded_store_without_migration(served):
    paths, supervisor, _, _ = served
    location = live_server(paths)
    assert location is not None and location.uri == supervisor.uri and location.pid == supervisor.pid
    assert json.loads(paths.server.read_text())["store"] == str(paths.store)
    store = open_store(_settings(paths), dim=384)  # what `gateway ingest | verify | eval` do
    try:
        assert store.guard._uri == supervisor.uri  # by URI, through the same MilvusStore code path
        from tests.storage.test_integrity import SCOPE

        assert store.count(SCOPE) == 10  # the rows written embedded are there
    finally:
        store.close()


def test_gateway_ingest_in_another_process_while_the_app_answers(served):
    paths, _, gateway, root = served
    doc = root / "teleporter.md"
    doc.write_text("# Teleporter calibration\n\nThe teleporter calibration drift is fixed by re-seating the coil.\n")
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(paths.store), "GATEWAY_TENANTS_DIR": str(ROOT / "tenants")}
    ingest = subprocess.Popen([sys.executable, "-m", "gateway.cli", "ingest", "--tenant", "acme", "--namespace",
                               "support", "--collection", "tickets", str(doc), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    answered = 0
    while ingest.poll() is None:
        body = _search(gateway.url)
        assert "errors" not in body, body  # serving goes on while the other process writes
        answered += 1
    out, err = ingest.communicate()
    assert ingest.returncode == 0, err
    assert json.loads(out)["chunks_written"] == 1 and answered > 0
    # Visible to the serving process at once, and recorded for both processes' start-up checks.
    assert [h["chunk"]["sourceId"] for h in _search(gateway.url)["data"]["search"]["hits"]] == ["teleporter.md"]
    assert any(name.startswith("gw_c_acme__support__tickets") for name in read_record(paths.record).collections)


def test_restore_is_refused_while_serve_runs(served, tmp_path):
    paths, _, _, _ = served
    with pytest.raises(BackupError, match="stop the gateway before restoring"):
        restore(tmp_path / "any-backup", paths, paths.tokens)


def test_a_killed_server_is_restarted_and_searches_recover(served):
    paths, supervisor, gateway, _ = served
    before = supervisor.pid
    os.kill(before, signal.SIGKILL)
    codes = set()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        body = _search(gateway.url)
        if "errors" not in body:
            break
        codes.update(e["extensions"]["code"] for e in body["errors"])
        time.sleep(0.2)
    else:
        pytest.fail(f"searches did not recover after the milvus-lite server was killed; codes {codes}")
    assert codes <= {"STORAGE_UNAVAILABLE"}  # in between: the typed, retryable error, never INTERNAL
    assert supervisor.restarts >= 1 and supervisor.pid != before
    location = read_location(paths)
    assert location is not None and location.pid == supervisor.pid and location.uri == supervisor.uri
    assert httpx.get(f"{gateway.url}/readyz", timeout=30).status_code == 200


def test_a_stale_location_file_is_ignored_and_stop_frees_the_store(tmp_path):
    paths = StorePaths.of(str(tmp_path / "g.db"))
    with SupervisedServer(paths) as supervisor:
        assert live_server(paths) is not None
        location = json.loads(paths.server.read_text())
    assert not paths.server.exists()  # stop removes it
    # What a serve killed with SIGKILL leaves behind: a file naming processes that are gone.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    paths.server.write_text(json.dumps({**location, "pid": dead.pid, "supervisor_pid": dead.pid}))
    assert live_server(paths) is None
    store = open_store(Settings(milvus_uri=str(paths.store), tenants_dir=ROOT / "tenants"), dim=384)
    try:
        assert store.guard._uri == str(paths.store)  # embedded, as without serve
    finally:
        store.close()
        _release(paths.store)
    assert supervisor.pid is not None


def test_a_location_file_whose_pid_now_names_an_unrelated_process_is_ignored(tmp_path):
    """The pid was reused (a container restart, a busy host) by a process that even names `gateway serve` in its
    command line: it started after the file was written, so it is not the serve the file names."""
    paths = StorePaths.of(str(tmp_path / "g.db"))
    with SupervisedServer(paths):
        location = json.loads(paths.server.read_text())
    time.sleep(1.5)  # the file predates the unrelated process by more than the clock's resolution
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gateway", "serve"])
    try:
        paths.server.write_text(json.dumps({**location, "pid": unrelated.pid, "supervisor_pid": unrelated.pid}))
        assert live_server(paths) is None
        store = open_store(Settings(milvus_uri=str(paths.store), tenants_dir=ROOT / "tenants"), dim=384)
        try:
            assert store.guard._uri == str(paths.store)  # opened, embedded: the stale file did not block it
        finally:
            store.close()
            _release(paths.store)
    finally:
        unrelated.kill()
        unrelated.wait()
