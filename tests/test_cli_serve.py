"""`gateway serve --workers 2` on the default embedded path: two real worker processes, one store."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.storage.record import StorePaths
from gateway.storage.server import read_location
from tests.conftest import ROOT, _free_port
from tests.serving import wait_ready

UPSERT = """mutation($docs: [DocumentInput!]!) {
  upsertDocuments(namespace: "support", collection: "tickets", documents: $docs) { chunksWritten }
}"""
FIND = '{ search(input: {query: "teleporter calibration", collection: "tickets", mode: SPARSE}) { hits { chunk { sourceId } } } }'
DOC = {"sourceId": "TP-1", "title": "Teleporter calibration", "text": "The teleporter calibration drifted again.",
       "metadata": {"status": "open", "priority": "high", "product": "storage", "year": 2026}}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_two_workers_share_one_store_and_stop_cleanly(tmp_path):
    paths = StorePaths.of(str(tmp_path / "data" / "gateway.db"))
    port = _free_port()
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(paths.store), "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"),
           "GATEWAY_INGEST_DEMO_ON_START": "false"}
    serve = subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve", "--workers", "2",
                              "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, serve, timeout_s=180)
        location = read_location(paths)
        assert location is not None and location.supervisor_pid == serve.pid

        written = httpx.post(f"{url}/graphql", json={"query": UPSERT, "variables": {"docs": [DOC]}},
                             headers={"Authorization": "Bearer demo-acme-writer"}, timeout=60).json()
        assert written == {"data": {"upsertDocuments": {"chunksWritten": 1}}}
        # Each fresh connection lands on one worker; its pid (from /readyz on the same connection) says which.
        found_by: dict[int, int] = {}
        for _ in range(60):
            with httpx.Client(base_url=url, timeout=60,
                              headers={"Authorization": "Bearer demo-acme-reader"}) as client:
                pid = client.get("/readyz").json()["pid"]
                hits = client.post("/graphql", json={"query": FIND}).json()["data"]["search"]["hits"]
            assert [h["chunk"]["sourceId"] for h in hits] == ["TP-1"], pid  # the write is visible in every worker
            found_by[pid] = found_by.get(pid, 0) + 1
            if len(found_by) == 2 and min(found_by.values()) >= 2:
                break
        assert len(found_by) == 2 and serve.pid not in found_by, found_by
    finally:
        serve.send_signal(signal.SIGTERM)  # what docker stop and Kubernetes send
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
            pytest.fail("gateway serve did not stop on SIGTERM")
    # One access line per request, the gateway's own: uvicorn's would only repeat the method and status.
    logged = serve.stderr.read()
    assert '"path":"/graphql"' in logged and 'HTTP/1.1" 200' not in logged, logged[-2000:]
    # Workers exit like Python programs after draining: their finalizers release what they made (the
    # upsert's progress bar made a multiprocessing lock), so the resource tracker reports no leak.
    assert "leaked semaphore" not in logged and "resource_tracker" not in logged, logged[-2000:]
    # Stopping serve stops its milvus-lite server and removes the location file.
    assert not paths.server.exists()
    deadline = time.monotonic() + 10
    while _alive(location.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(location.pid)


def test_workers_on_an_embedded_only_store_are_refused(tmp_path, monkeypatch, capsys):
    from gateway.cli import main

    monkeypatch.setenv("GATEWAY_MILVUS_URI", str(tmp_path / "g.db"))
    monkeypatch.setenv("GATEWAY_LITE_SERVER", "false")
    # A configuration mistake, refused as every other one is: `gateway cannot start: ...`, exit 3.
    assert main(["serve", "--workers", "2"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("gateway cannot start: ") and "--workers 2 needs one store all workers can reach" in err
    assert main(["serve", "--workers", "0"]) == 3
    assert "--workers 0: a gateway needs at least 1 worker" in capsys.readouterr().err


def _serve(env: dict, port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_rolling_restart_under_load_fails_no_request(tmp_path):
    """Start a new serve next to the old one on the same store, stop the old one: no request fails."""
    from benchmarks.rolling_restart import Load

    paths = StorePaths.of(str(tmp_path / "data" / "gateway.db"))
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(paths.store), "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"),
           "GATEWAY_INGEST_DEMO_ON_START": "false"}
    old_port, new_port = _free_port(), _free_port()
    old = _serve(env, old_port, tmp_path / "old.log")
    new = None
    try:
        wait_ready(f"http://127.0.0.1:{old_port}", old, timeout_s=180)
        written = httpx.post(f"http://127.0.0.1:{old_port}/graphql", json={"query": UPSERT, "variables": {"docs": [DOC]}},
                             headers={"Authorization": "Bearer demo-acme-writer"}, timeout=60).json()
        assert written == {"data": {"upsertDocuments": {"chunksWritten": 1}}}
        new = _serve(env, new_port, tmp_path / "new.log")
        wait_ready(f"http://127.0.0.1:{new_port}", new, timeout_s=180)
        assert read_location(paths).supervisor_pid == old.pid  # the newcomer attached to the old one's server

        with Load(f"http://127.0.0.1:{new_port}", FIND, expect="TP-1", rate=40.0, threads=2) as load:
            time.sleep(1.0)
            _stop(old)
            # The newcomer took over and started its own server; it keeps answering.
            location = _wait_for(lambda: (loc := read_location(paths)) and loc.supervisor_pid == new.pid and loc, 30)
            time.sleep(2.0)
        report = load.report()
        assert report.failed == 0, report.failures[:3]
        assert report.answered > 20 and report.longest_gap_s < 8.0, report  # requests waited, bounded
        assert location.pid != 0 and _alive(location.pid)
        assert httpx.get(f"http://127.0.0.1:{new_port}/readyz", timeout=30).status_code == 200
    finally:
        _stop(old)
        if new is not None:
            _stop(new)
    assert not paths.server.exists()


def _wait_for(condition, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"not within {timeout_s:.0f} s")


def test_serve_refuses_a_damaged_store_before_milvus_lite_opens_it(tmp_path, monkeypatch, capsys):
    from gateway.cli import main
    from gateway.runtime import open_store
    from gateway.settings import Settings
    from gateway.storage.integrity import lock_holder, manifest_files
    from tests.storage.test_integrity import SCOPE, write_rows
    from tests.storage.test_server import _release

    paths = StorePaths.of(str(tmp_path / "gateway.db"))
    store = open_store(Settings(milvus_uri=str(paths.store), tenants_dir=ROOT / "tenants"), dim=384)
    write_rows(store, n=10)
    collection = paths.store / "collections" / store.physical(SCOPE).chunks
    store.close()
    _release(paths.store)
    data_files = [collection / rel for rel in manifest_files(collection)]
    (collection / "manifest.json").write_bytes(b"")
    monkeypatch.setenv("GATEWAY_MILVUS_URI", str(paths.store))
    monkeypatch.setenv("GATEWAY_TENANTS_DIR", str(ROOT / "tenants"))
    monkeypatch.setenv("GATEWAY_INGEST_DEMO_ON_START", "false")
    assert main(["serve", "--port", str(_free_port())]) == 3
    err = capsys.readouterr().err
    assert "gateway cannot start: refusing to open the store" in err and "manifest.json: is not valid JSON" in err
    # milvus-lite never opened it, so it deleted nothing
    assert data_files and all(path.exists() for path in data_files)
    assert lock_holder(paths.store) is None and not paths.server.exists()


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped (a reaped or exited worker is not running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return _alive(pid)
    return state not in ("Z", "X")


def test_workers_exit_when_serve_is_killed_and_the_port_is_free_again(tmp_path):
    import socket

    paths = StorePaths.of(str(tmp_path / "data" / "gateway.db"))
    port = _free_port()
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(paths.store), "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"),
           "GATEWAY_INGEST_DEMO_ON_START": "false"}
    serve = subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve", "--workers", "2",
                              "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    workers: set[int] = set()
    try:
        wait_ready(url, serve, timeout_s=180)
        for _ in range(60):
            with httpx.Client(base_url=url, timeout=30) as client:
                workers.add(client.get("/readyz").json()["pid"])
            if len(workers) == 2:
                break
        assert len(workers) == 2, workers
        serve.send_signal(signal.SIGKILL)  # no chance to stop its workers itself
        serve.wait(timeout=10)
        deadline = time.monotonic() + 20
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(pid) for pid in workers), [pid for pid in workers if _running(pid)]
        with socket.socket() as sock:  # what the next `gateway serve` does
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        for pid in workers:  # a failing run must not leave workers behind either
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _serve_exit(paths: StorePaths, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(paths.store), "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"),
           "GATEWAY_INGEST_DEMO_ON_START": "false"}
    return subprocess.run([str(Path(sys.executable).parent / "gateway"), "serve", "--port", str(_free_port()), *args],
                          env=env, capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_refused_store_ends_serve_with_exit_3_and_one_line(tmp_path, workers):
    paths = StorePaths.of(str(tmp_path / "data" / "gateway.db"))
    paths.record.parent.mkdir(parents=True)
    paths.record.write_text('{"collections": {"gw_c_x": {"ro')  # a record cut short
    done = _serve_exit(paths, "--workers", workers)
    # Before: with 2 workers each worker failed and uvicorn's parent exited 0; with 1, a traceback.
    assert done.returncode == 3, done.stderr[-3000:]
    refusals = [line for line in done.stderr.splitlines() if "gateway cannot start: " in line]
    assert len(refusals) == 1 and str(paths.record) in refusals[0] and "unreadable" in refusals[0], done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_a_read_only_store_ends_serve_with_exit_3_and_one_line(tmp_path):
    from gateway.runtime import open_store
    from gateway.settings import Settings
    from tests.storage.test_faults import read_only

    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    paths = StorePaths.of(str(tmp_path / "data" / "gateway.db"))
    open_store(Settings(milvus_uri=str(paths.store)), dim=384).close()
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(paths.store))
    with read_only(paths.store.parent):
        done = _serve_exit(paths)
    assert done.returncode == 3, done.stderr[-3000:]  # was 75, a retry, with the child's traceback
    assert done.stderr.strip().splitlines()[-1] == (
        f"gateway cannot start: cannot open milvus-lite directory '{paths.store}': {paths.store} is on a read-only "
        "file system; milvus-lite writes its LOCK, write-ahead log and manifests even to serve reads, so mount it "
        "read-write (or copy it to a writable disk) and start again"), done.stderr
    assert "Traceback" not in done.stderr


def test_an_unset_env_key_ends_serve_with_exit_3_and_one_refusal_before_serving(tmp_path):
    """It printed "serving", then died with a raw traceback and no `gateway cannot start:` line."""
    tenants = tmp_path / "tenants"
    shutil.copytree(ROOT / "tenants", tenants)
    acme = tenants / "acme.yaml"
    acme.write_text(acme.read_text().replace("api_keys:\n", "api_keys:\n  - {env: SERVE_UNSET_ADMIN_KEY, role: admin}\n", 1))
    env = {k: v for k, v in os.environ.items() if k != "SERVE_UNSET_ADMIN_KEY"}
    env.update({"GATEWAY_MILVUS_URI": str(tmp_path / "data" / "gateway.db"), "GATEWAY_TENANTS_DIR": str(tenants),
                "GATEWAY_INGEST_DEMO_ON_START": "false"})
    done = subprocess.run([str(Path(sys.executable).parent / "gateway"), "serve", "--port", str(_free_port())],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stderr.startswith("gateway cannot start: "), done.stderr[-3000:]
    assert (f"{acme}: api_keys.0: tenant 'acme' api_keys[0] refers to environment variable "
            "'SERVE_UNSET_ADMIN_KEY', which is not set") in done.stderr
    assert "Traceback" not in done.stderr and "serving" not in done.stderr, done.stderr[-3000:]
