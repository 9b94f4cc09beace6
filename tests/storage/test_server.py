"""`gateway serve`'s supervised milvus-lite server: other processes share the store, a dead child comes back."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from pymilvus import MilvusClient, MilvusException
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

from gateway.errors import StorageUnavailable
from gateway.runtime import open_store
from gateway.settings import Settings
from gateway.storage.backup import BackupError, restore
from gateway.storage.integrity import lock_holder, manifest_files
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


def test_the_child_runs_this_code_not_a_gateway_package_in_the_current_directory(tmp_path, monkeypatch):
    """`python -m` puts the current directory first on a child's path: serving from a directory that
    holds another `gateway` package (another checkout or version) ran that package's server."""
    decoy = tmp_path / "elsewhere" / "gateway"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy gateway package was imported')\n")
    monkeypatch.chdir(decoy.parent)
    paths = StorePaths.of(str(tmp_path / "g.db"))
    with SupervisedServer(paths):
        location = live_server(paths)
        assert location is not None
        client = MilvusClient(location.uri, token=location.token)
        assert client.list_collections() == []
        client.close()


def test_the_child_runs_in_a_session_of_its_own(tmp_path):
    """A terminal's Ctrl-C (to the gateway's foreground group) never reaches it: the gateway stops it."""
    with SupervisedServer(StorePaths.of(str(tmp_path / "g.db"))) as supervisor:
        child = supervisor.pid
        assert child is not None
        assert os.getsid(child) == child != os.getsid(0)


def _until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"{what} within {timeout_s:.0f} s")


def test_the_port_refuses_a_client_without_the_secret(tmp_path):
    paths = StorePaths.of(str(tmp_path / "g.db"))
    with SupervisedServer(paths) as supervisor:
        location = read_location(paths)
        assert location is not None
        # What a local user sees (`ss -ltn` shows the port; milvus-lite checks no credentials itself):
        # without the secret in the 0600 location file, no call gets through.
        with pytest.raises(MilvusException):
            MilvusClient(uri=location.uri).list_collections()
        channel = grpc.insecure_channel(f"127.0.0.1:{location.port}")
        try:
            with pytest.raises(grpc.RpcError) as caught:
                milvus_pb2_grpc.MilvusServiceStub(channel).ShowCollections(milvus_pb2.ShowCollectionsRequest(),
                                                                           timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            channel.close()
        assert stat.S_IMODE(paths.server.stat().st_mode) == 0o600
        cmdline = Path(f"/proc/{supervisor.pid}/cmdline").read_bytes().decode()
        assert location.token and location.token not in cmdline  # /proc/PID/cmdline is world-readable
        owner = MilvusClient(uri=location.uri, token=location.token, dedicated=True)
        try:
            assert owner.list_collections() == []
        finally:
            owner.close()


def test_an_embedded_store_refuses_a_client_without_the_secret(tmp_path):
    """Without `gateway serve` (GATEWAY_LITE_SERVER=false, or a command run alone), pymilvus serves the
    store from inside the process on a loopback port: the same secret check applies there."""
    from milvus_lite.server_manager import server_manager_instance

    paths = StorePaths.of(str(tmp_path / "e.db"))
    store = open_store(_settings(paths), dim=384)
    try:
        assert store.guard._uri == str(paths.store)  # embedded
        uri = server_manager_instance.start_and_get_uri(str(paths.store))  # the port it listens on
        assert uri is not None and uri.startswith("http://127.0.0.1:")
        with pytest.raises(MilvusException):
            MilvusClient(uri=uri).list_collections()
        assert store.guard.list_collections() == []  # the store's own client has the secret
    finally:
        store.close()
        _release(paths.store)


def test_storage_unavailable_names_no_address_or_path(tmp_path):
    paths = StorePaths.of(str(tmp_path / "g.db"))
    supervisor = SupervisedServer(paths)
    location = supervisor.start()
    store = open_store(_settings(paths), dim=384)
    try:
        store.guard._health.wait_s = 0.5
        supervisor.stop()  # the server is gone and nobody restarts it
        messages = []
        for _ in range(2):  # the call that finds it gone, then one the probe already knows about
            with pytest.raises(StorageUnavailable) as caught:
                store.guard.list_collections()
            messages.append(caught.value.message)
            time.sleep(1.0)
        for message in messages + [store.guard.faults.reason]:
            for secret in (location.uri, f":{location.port}", "127.0.0.1", str(tmp_path)):
                assert secret not in message, message
    finally:
        store.close()


def test_a_store_damaged_while_serving_is_not_restarted_after_a_crash(tmp_path):
    from tests.storage.test_integrity import SCOPE, write_rows

    paths = StorePaths.of(str(tmp_path / "gateway.db"))
    with SupervisedServer(paths) as supervisor:
        store = open_store(_settings(paths), dim=384)
        try:
            write_rows(store, n=10)
            collection = paths.store / "collections" / store.physical(SCOPE).chunks
            data_files = [collection / rel for rel in manifest_files(collection)]
            record = paths.record.read_bytes()
            manifest = collection / "manifest.json"
            good = manifest.read_bytes()
            manifest.write_bytes(b"")  # damaged while serving ...
            crashed = supervisor.pid
            os.kill(crashed, signal.SIGKILL)  # ... then the child crashes
            refused = _until(lambda: (read_location(paths) or None) and read_location(paths).refused, 20,
                             "the supervisor did not refuse to restart milvus-lite")
            assert f"{manifest}: is not valid JSON (empty file)" in refused and "gateway restore" in refused
            # Every process that uses the store says why, and nothing reaches the store.
            _until(lambda: "manifest.json" in (store.guard.unavailable() or ""), 10,
                   "the served store's health did not report the refusal")
            with pytest.raises(StorageUnavailable, match="found the store damaged"):
                write_rows(store, n=1)
            assert supervisor.pid == crashed and lock_holder(paths.store) is None  # no child opened it
            assert all(path.exists() for path in data_files)  # milvus-lite would have deleted them
            assert paths.record.read_bytes() == record
            # Restored: the supervisor's next look finds it sound and starts the child, with every row.
            manifest.write_bytes(good)
            _until(lambda: store.guard.unavailable() is None, 30, "the restored store did not come back")
            assert store.count(SCOPE) == 10 and read_location(paths).refused == ""
        finally:
            store.close()


def test_a_stopped_server_fails_requests_fast_and_readyz_answers(served):
    paths, supervisor, gateway, _ = served
    assert "errors" not in _search(gateway.url)
    os.kill(supervisor.pid, signal.SIGSTOP)  # it still accepts connections, and answers nothing
    try:
        started = time.monotonic()
        first = _search(gateway.url)  # in flight when the probes notice: cancelled, not left waiting
        assert first["errors"][0]["extensions"]["code"] == "STORAGE_UNAVAILABLE"
        assert time.monotonic() - started < 10  # the request deadline is 15 s
        started = time.monotonic()
        ready = httpx.get(f"{gateway.url}/readyz", timeout=10)
        assert ready.status_code == 503 and "answered none" in ready.json()["reason"]
        body = _search(gateway.url)
        assert time.monotonic() - started < 2  # known unresponsive: both answered at once
        assert body["errors"][0]["extensions"]["code"] == "STORAGE_UNAVAILABLE"
        assert "not answering" in body["errors"][0]["message"]
    finally:
        os.kill(supervisor.pid, signal.SIGCONT)
    _until(lambda: "errors" not in _search(gateway.url), 30, "searches did not recover after SIGCONT")
    assert httpx.get(f"{gateway.url}/readyz", timeout=30).status_code == 200


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
