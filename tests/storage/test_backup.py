"""Backup and restore of a milvus-lite store with parents, token vectors and the gateway's record."""

import json
import shutil
import sqlite3
import time

import numpy as np
import pytest

from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.runtime import open_store
from gateway.settings import Settings
from gateway.storage.backup import BackupError, backup, check_backup, restore
from gateway.storage.record import StorePaths, read_record
from gateway.storage.schema import CHUNK_OUTPUT_FIELDS, PARENT_OUTPUT_FIELDS
from gateway.storage.token_vectors import TokenTarget, TokenVectorStore
from tests.conftest import make_ref

REF = make_ref(collection="backup", chunking={"child_chars": 200, "child_overlap": 20, "parent_chars": 600})
DOCS = [
    Document("refunds", "Refunds are issued within 14 days. " * 12, title="Refunds", metadata={"year": 2024}),
    Document("outages", "During an outage the status page is updated every 30 minutes. " * 8, title="Outages"),
    Document("keys", "Rotate API keys every 90 days and never commit them. " * 6, title="Keys",
             source_url="https://example.com/keys"),
]


def _release(path) -> None:
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(path))


@pytest.fixture(scope="module")
def source(tmp_path_factory, embedder):
    """A store written by ingest with parents and token vectors, closed again."""
    root = tmp_path_factory.mktemp("backup-src")
    paths = StorePaths.of(str(root / "g.db"))
    store = open_store(Settings(milvus_uri=str(paths.store)), dim=embedder.dim)
    tokens = TokenVectorStore(store)
    report = ingest_documents(store, embedder, REF, DOCS, progress=False, tokens=TokenTarget(tokens, 128))
    assert report.parents_written > 0 and report.token_vectors_written == report.chunks_written > 3
    tokens.close()
    store.close()
    return paths


def _dump(paths: StorePaths) -> dict:
    """Every row of both collections (vectors included) and every token-vector row."""
    store = open_store(Settings(milvus_uri=str(paths.store)), dim=384)
    try:
        scope = REF.scope
        ids = sorted(store.inventory(scope))
        rows = store.guard.get(scope.chunk_collection, ids=ids, output_fields=[*CHUNK_OUTPUT_FIELDS, "dense"])
        chunks = {r["id"]: {**r, "dense": np.round(np.asarray(r["dense"], dtype=np.float32), 7).tolist()}
                  for r in rows}
        keys = sorted(store.parent_inventory(scope))
        parents = {r["key"]: dict(r) for r in store.guard.get(scope.parent_collection, ids=keys,
                                                              output_fields=PARENT_OUTPUT_FIELDS)}
        # Token vectors live in a companion collection of the store, so the store's copy holds them.
        matrices = TokenVectorStore(store).get(scope, [(r["id"], r["content_hash"]) for r in rows], 128)
        tokens = {row_id: m.tolist() for row_id, m in sorted(matrices.items())}
    finally:
        store.close()
        _release(paths.store)
    return {"chunks": chunks, "parents": parents, "tokens": tokens}


def test_round_trip_restores_every_row(source, tmp_path):
    summary = backup(source, source.tokens, tmp_path / "bk")
    assert summary.rows == read_record(source.record).total_rows > 0
    target = StorePaths.of(str(tmp_path / "live" / "g.db"))
    done = restore(tmp_path / "bk", target, target.tokens)
    assert done["rows"] == summary.rows and done["kept_aside"] == []
    original, restored = _dump(source), _dump(target)
    assert len(restored["chunks"]) > 3 and len(restored["parents"]) >= 3 and len(restored["tokens"]) > 3
    assert restored == original
    assert read_record(target.record).collections == read_record(source.record).collections


def test_restore_keeps_the_replaced_store_aside(source, tmp_path):
    backup(source, source.tokens, tmp_path / "bk")
    target = StorePaths.of(str(tmp_path / "live" / "g.db"))
    restore(tmp_path / "bk", target, target.tokens)
    done = restore(tmp_path / "bk", target, target.tokens)
    assert [p.split("/")[-1].split(".before-restore-")[0] for p in done["kept_aside"]] == [
        "g.db", "g.record.json"]


def test_restore_creates_no_empty_token_vector_directory(source, tmp_path):
    backup(source, source.tokens, tmp_path / "bk")
    assert not (tmp_path / "bk" / "store.tokens").exists()  # the store has no legacy token directory
    (tmp_path / "old").mkdir()  # a backup taken before: with an empty store.tokens/
    shutil.copytree(tmp_path / "bk", tmp_path / "old" / "bk")
    (tmp_path / "old" / "bk" / "store.tokens").mkdir()
    for bk in (tmp_path / "bk", tmp_path / "old" / "bk"):
        target = StorePaths.of(str(bk.parent / "live" / "g.db"))
        restore(bk, target, target.tokens)
        assert target.store.is_dir() and not target.tokens.exists()


def test_a_legacy_token_vector_directory_is_backed_up_and_restored(source, tmp_path):
    legacy = tmp_path / "g.tokens"
    legacy.mkdir()
    db = sqlite3.connect(legacy / "t.sqlite")
    db.execute("create table v (id text, m blob)")
    db.execute("insert into v values ('a', x'01')")
    db.commit()
    db.close()
    backup(source, legacy, tmp_path / "bk")
    target = StorePaths.of(str(tmp_path / "live" / "g.db"))
    restore(tmp_path / "bk", target, target.tokens)
    restored = sqlite3.connect(target.tokens / "t.sqlite")
    assert restored.execute("select id, m from v").fetchall() == [("a", b"\x01")]
    restored.close()


def test_a_changed_backup_file_is_refused_before_anything_moves(source, tmp_path):
    backup(source, source.tokens, tmp_path / "bk")
    data = next((tmp_path / "bk" / "store.db").rglob("*.parquet"))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(BackupError, match=rf"{data.name} differs from the sha256 recorded"):
        check_backup(tmp_path / "bk")
    target = StorePaths.of(str(tmp_path / "live" / "g.db"))
    with pytest.raises(BackupError):
        restore(tmp_path / "bk", target, target.tokens)
    assert not target.store.exists()


def test_backup_refuses_a_used_destination_and_a_missing_store(source, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(BackupError, match="exists and is not empty"):
        backup(source, source.tokens, tmp_path / "used")
    with pytest.raises(BackupError, match="there is no milvus-lite store"):
        backup(StorePaths.of(str(tmp_path / "none.db")), tmp_path / "t", tmp_path / "bk")


def test_backup_manifest_lists_every_file(source, tmp_path):
    backup(source, source.tokens, tmp_path / "bk")
    listed = json.loads((tmp_path / "bk" / "backup.json").read_text())["files"]
    assert "store.record.json" in listed and any(k.startswith("store.db/collections/gw_t_") for k in listed)
    assert any(k.endswith("manifest.json") for k in listed)


@pytest.mark.parametrize("served", [False, True], ids=["embedded", "served"])
def test_backup_while_writes_continue_is_consistent(tmp_path, served):
    import contextlib

    from gateway.storage.server import SupervisedServer

    paths = StorePaths.of(str(tmp_path / "busy" / "g.db"))
    # Served: the writes come through `gateway serve`'s milvus-lite server, as from another process.
    server = SupervisedServer(paths) if served else contextlib.nullcontext()
    with server:
        _backup_while_writing(paths, tmp_path, served)


def _backup_while_writing(paths: StorePaths, tmp_path, served: bool) -> None:
    import threading

    from tests.storage.test_integrity import write_rows

    store = open_store(Settings(milvus_uri=str(paths.store)), dim=384)
    assert store.guard._uri.startswith("http") == served
    write_rows(store, n=10)
    stop, written = threading.Event(), []

    def writer():
        n = 10
        while not stop.is_set() and n < 200:
            n += 10
            write_rows(store, n=n)  # upserts rows 0..n: each call adds 10 chunks and 10 parents
            written.append(n)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while not written:
            time.sleep(0.01)
        summary = backup(paths, paths.tokens, tmp_path / "bk")
    finally:
        stop.set()
        thread.join(60)
        store.close()
    target = StorePaths.of(str(tmp_path / "restored" / "g.db"))
    done = restore(tmp_path / "bk", target, target.tokens)
    recorded = read_record(tmp_path / "bk" / "store.record.json").collections
    # Each collection was cut between two write calls (every call adds 10 rows), never inside one.
    assert all(entry.rows % 10 == 0 and entry.rows >= 10 for entry in recorded.values())
    assert done["rows"] == summary.rows == sum(e.rows for e in recorded.values())
