"""The guarded client: storage failures are StorageUnavailable, released collections are loaded again."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from pymilvus import MilvusException

from gateway.errors import ErrorCode, StorageUnavailable
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope
from tests.conftest import _free_port, _wait_listening
from tests.storage.test_integrity import write_rows

SCOPE = Scope("acme", "docs", "guarded")


def _query_vector() -> np.ndarray:
    v = np.ones(384, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_released_collection_is_loaded_again_on_first_use(lite_store):
    write_rows(lite_store, SCOPE, n=5)
    lite_store.guard.raw.release_collection(SCOPE.chunk_collection)
    assert not lite_store.is_loaded(SCOPE)
    assert len(lite_store.search_dense(SCOPE, _query_vector(), 3)) == 3
    assert lite_store.is_loaded(SCOPE)


def test_a_storage_failure_is_storage_unavailable_with_a_retry_hint(lite_store):
    with pytest.raises(StorageUnavailable, match=r"storage failed during query on gw_c_nope: .* retry in 5 s") as caught:
        lite_store.guard.query("gw_c_nope", filter="", output_fields=["count(*)"])
    assert caught.value.code is ErrorCode.STORAGE_UNAVAILABLE
    assert lite_store.uri not in caught.value.message  # clients are not told where the store is
    assert lite_store.guard.faults.failing


def test_a_malformed_expression_is_not_a_storage_failure(lite_store):
    write_rows(lite_store, SCOPE, n=5)
    with pytest.raises(MilvusException) as caught:
        lite_store.guard.query(SCOPE.chunk_collection, filter="id === 1", output_fields=["id"])
    assert not isinstance(caught.value, StorageUnavailable)


def _server(port: int, data: Path) -> subprocess.Popen:
    executable = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    process = subprocess.Popen([executable, "server", "--host", "127.0.0.1", "--port", str(port),
                                "--data-dir", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if not _wait_listening(process, port):
        process.kill()
        pytest.fail("milvus-lite server did not start")
    return process


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)  # SIGINT closes the engine cleanly
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_searches_recover_by_themselves_after_the_server_restarts(tmp_path):
    port = _free_port()
    server = _server(port, tmp_path / "data")
    store = MilvusStore(f"http://127.0.0.1:{port}")
    try:
        write_rows(store, SCOPE, n=5)
        assert len(store.search_dense(SCOPE, _query_vector(), 3)) == 3
        _stop(server)
        with pytest.raises(StorageUnavailable, match="retry in"):
            store.search_dense(SCOPE, _query_vector(), 3)
        server = _server(port, tmp_path / "data")  # collections come back released
        deadline, hits = time.monotonic() + 30, None
        while hits is None and time.monotonic() < deadline:
            try:
                hits = store.search_dense(SCOPE, _query_vector(), 3)
            except StorageUnavailable:
                time.sleep(0.1)  # the gRPC channel reconnects with back-off
        assert hits is not None and len(hits) == 3
    finally:
        store.close()
        _stop(server)
