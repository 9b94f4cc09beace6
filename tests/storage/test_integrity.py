"""Pre-open checks of a milvus-lite store: damage is refused, named, and left untouched on disk."""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from gateway.errors import StorageUnavailable, StoreRefused
from gateway.runtime import adopt, open_store
from gateway.settings import Settings
from gateway.storage.integrity import check_files, collection_dirs, lock_holder
from gateway.storage.milvus import ChunkRecord, MilvusStore, ParentRecord
from gateway.storage.record import StorePaths, read_record
from gateway.storage.schema import Scope

SCOPE = Scope("acme", "docs", "integrity")
ROWS = 30


def _unit(rng) -> np.ndarray:
    v = rng.standard_normal(384).astype(np.float32)
    return v / np.linalg.norm(v)


def write_rows(store: MilvusStore, scope: Scope = SCOPE, n: int = ROWS) -> None:
    rng = np.random.default_rng(7)
    store.ensure(scope)
    store.upsert_parents(scope, [ParentRecord(key=f"s{i}#p0", source_id=f"s{i}", title="t", text="parent",
                                              content_hash="h") for i in range(n)])
    store.upsert_chunks(scope, [ChunkRecord(source_id=f"s{i}", chunk_id="0", parent_key=f"s{i}#p0",
                                            text=f"chunk {i}", title="t", content_hash="h", created_at=1,
                                            updated_at=1, dense=_unit(rng)) for i in range(n)])


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A store of ROWS chunks and parents written through the gateway, so it has a record."""
    root = tmp_path_factory.mktemp("pristine")
    store = open_store(Settings(milvus_uri=str(root / "g.db")), dim=384)
    write_rows(store)
    store.close()
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(root / "g.db"))  # frees the LOCK for copies
    return root


@pytest.fixture
def copy(pristine, tmp_path):
    shutil.copytree(pristine, tmp_path / "s")
    return StorePaths.of(str(tmp_path / "s" / "g.db"))


def _files(paths: StorePaths) -> dict[str, int]:
    return {str(p.relative_to(paths.store)): p.stat().st_size for p in paths.store.rglob("*")
            if p.is_file() and p.name != "LOCK"}


def _chunk_dir(paths: StorePaths):
    return collection_dirs(paths.store)[SCOPE.chunk_collection]


def _open(paths: StorePaths, **settings) -> MilvusStore:
    return open_store(Settings(milvus_uri=str(paths.store), **settings), dim=384)


def test_a_healthy_store_opens_and_matches_its_record(copy):
    assert check_files(copy, read_record(copy.record)) == []
    store = _open(copy)
    try:
        assert store.count(SCOPE) == ROWS
    finally:
        store.close()


def test_milvus_lite_alone_deletes_data_behind_an_empty_manifest(copy):
    """The hazard the pre-open check exists for, reproduced on the bare engine."""
    from pymilvus import MilvusClient

    (_chunk_dir(copy) / "manifest.json").write_text("")
    client = MilvusClient(uri=str(copy.store))
    client.load_collection(SCOPE.chunk_collection)
    rows = client.query(SCOPE.chunk_collection, filter="", output_fields=["count(*)"])[0]["count(*)"]
    client.close()
    assert rows == 0
    assert not list((_chunk_dir(copy) / "partitions").rglob("*.parquet"))  # the data file was deleted


@pytest.mark.parametrize("damage, reason", [
    ("", r"manifest\.json: is not valid JSON \(empty file\)"),
    ("{garbage", r"manifest\.json: is not valid JSON"),
    ("[1, 2]", r"manifest\.json: is not a JSON object"),
    (None, r"manifest\.json: is missing; milvus-lite would fall back to manifest\.json\.prev"),
])
def test_a_damaged_manifest_is_refused_and_nothing_is_deleted(copy, damage, reason):
    manifest = _chunk_dir(copy) / "manifest.json"
    if damage is None:
        manifest.unlink()
    else:
        manifest.write_text(damage)
    before = _files(copy)
    with pytest.raises(StorageUnavailable, match=reason) as caught:
        _open(copy)
    assert "gateway restore" in caught.value.message and "Nothing was changed on disk" in caught.value.message
    assert _files(copy) == before


def test_a_missing_or_truncated_data_file_is_named(copy):
    data = next((_chunk_dir(copy) / "partitions").rglob("*.parquet"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(StorageUnavailable, match=rf"{data.name}: is not a complete Parquet file"):
        _open(copy)
    data.unlink()
    with pytest.raises(StorageUnavailable, match=rf"{data.name}: is named by manifest.json but missing"):
        _open(copy)


def test_bytes_changed_inside_a_data_file_are_refused(copy):
    """16 bytes overwritten mid-file: still a valid-looking Parquet file, but not the one written."""
    data = next((_chunk_dir(copy) / "partitions").rglob("*.parquet"))
    raw = bytearray(data.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 16] = b"\x7f" * 16
    data.write_bytes(bytes(raw))
    with pytest.raises(StorageUnavailable, match=rf"{data.name}: differs from the sha256 the gateway recorded"):
        _open(copy)


def test_a_corrupt_schema_is_named(copy):
    (_chunk_dir(copy) / "schema.json").write_text("{")
    with pytest.raises(StorageUnavailable, match=r"schema\.json: is not valid JSON"):
        _open(copy)


def test_a_removed_collection_directory_is_refused_unless_empty_is_accepted(copy):
    shutil.rmtree(_chunk_dir(copy))
    with pytest.raises(StorageUnavailable, match=rf"{SCOPE.chunk_collection}: collection directory is missing, "
                                                 rf"but the gateway's record .* says it held {ROWS} row"):
        _open(copy)
    store = _open(copy, accept_empty_store=True)
    store.close()
    assert SCOPE.chunk_collection not in read_record(copy.record).collections  # the record now says so


def test_a_missing_store_directory_with_a_record_is_refused(copy):
    shutil.rmtree(copy.store)
    with pytest.raises(StorageUnavailable, match=r"the store directory is missing, but the gateway's record "
                                                 r".* lists 2 collection\(s\) with 60 row\(s\)"):
        _open(copy)
    assert not copy.store.exists()


def test_fewer_rows_than_recorded_is_refused(copy):
    payload = json.loads(copy.record.read_text())
    payload["collections"][SCOPE.chunk_collection].update(rows=ROWS + 5, min_rows=ROWS + 5)
    copy.record.write_text(json.dumps(payload))
    with pytest.raises(StorageUnavailable, match=rf"holds {ROWS} row\(s\), but the gateway's record .* says it "
                                                 rf"held {ROWS + 5}"):
        _open(copy)


def test_a_store_without_a_record_is_refused_until_verify_adopts_it(copy):
    copy.record.unlink()
    before = _files(copy)
    with pytest.raises(StoreRefused, match=r"holds 2 collection\(s\) but the gateway's record .*g\.record\.json' "
                                           r"is missing .* Run `gateway verify` first"):
        _open(copy)
    assert not copy.record.exists() and _files(copy) == before  # nothing recorded, nothing opened
    store = open_store(Settings(milvus_uri=str(copy.store)), dim=384, verifying=True)
    try:
        assert not copy.record.exists()  # opening to verify records nothing
        assert adopt(store, copy) == {SCOPE.chunk_collection: ROWS, SCOPE.parent_collection: ROWS}
    finally:
        store.close()
    assert read_record(copy.record).collections[SCOPE.chunk_collection].rows == ROWS
    _open(copy).close()  # adopted: it opens, and its data files are hashed from now on
    assert read_record(copy.record).collections[SCOPE.chunk_collection].files


def test_a_damaged_parquet_footer_is_named_even_without_a_record(copy):
    """Without a record no sha256 is known; the footer milvus-lite reads first is still checked."""
    copy.record.unlink()
    data = next((_chunk_dir(copy) / "partitions").rglob("*.parquet"))
    raw = bytearray(data.read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little")  # Parquet: <footer> <4-byte footer length> PAR1
    start = len(raw) - 8 - footer
    raw[start:start + 16] = bytes(b ^ 0xFF for b in raw[start:start + 16])
    data.write_bytes(bytes(raw))
    with pytest.raises(StoreRefused, match=rf"{data.name}: has a damaged Parquet footer"):
        _open(copy)


def test_a_lock_held_by_another_process_names_its_pid(copy):
    code = ("import sys, time\nfrom gateway.storage.milvus import MilvusStore\n"
            f"MilvusStore({str(copy.store)!r})\nprint('ready', flush=True)\ntime.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert lock_holder(copy.store) == holder.pid
        with pytest.raises(StorageUnavailable, match=rf"PID {holder.pid} \(.*python.*\) holds its lock"):
            _open(copy)
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while lock_holder(copy.store) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock_holder(copy.store) is None
    assert os.path.exists(copy.store / "LOCK")


def test_a_corrupt_page_is_named_when_no_sha256_is_recorded_for_the_file(copy):
    """Without a record the file cannot be compared; it is decoded instead, so a page header milvus-lite
    would choke on (failing every call, as a "retry") is named before opening."""
    import pyarrow.parquet as pq

    copy.record.unlink()
    data = next((_chunk_dir(copy) / "partitions").rglob("*.parquet"))
    column = pq.read_metadata(data).row_group(0).column(1)  # `id`: its page header
    start = column.dictionary_page_offset or column.data_page_offset
    raw = bytearray(data.read_bytes())
    raw[start:start + 6] = bytes(b ^ 0xFF for b in raw[start:start + 6])
    data.write_bytes(bytes(raw))
    with pytest.raises(StoreRefused, match=rf"{data.name}: cannot be decoded \(.*\), and the gateway's record holds "
                                           r"no sha256 for it"):
        _open(copy)
