"""The gateway's record beside a milvus-lite store: atomic rewrites, delete windows, the write gate."""

import json
import multiprocessing
import time

import pytest

from gateway.storage.record import (
    RecordError,
    StorePaths,
    StoreRecord,
    WriteGate,
    read_record,
)


def test_paths_sit_beside_the_store(tmp_path):
    paths = StorePaths.of(str(tmp_path / "gateway.db"))
    assert paths.record == tmp_path / "gateway.record.json"
    assert paths.write_lock == tmp_path / "gateway.writes.lock"
    assert paths.tokens == tmp_path / "gateway.tokens"


def test_committed_counts_survive_a_reread(tmp_path):
    record = StoreRecord(tmp_path / "r.json")
    record.committed("gw_c_x", 40)
    record.committed("gw_p_x", 7)
    again = read_record(tmp_path / "r.json")
    assert again.exists and again.total_rows == 47
    assert again.collections["gw_c_x"].rows == 40 and again.collections["gw_c_x"].min_rows == 40
    assert not list(tmp_path.glob(".*.tmp"))  # the temp file was renamed, not left behind


def test_a_delete_in_flight_accepts_fewer_rows_until_committed(tmp_path):
    record = StoreRecord(tmp_path / "r.json")
    record.committed("gw_c_x", 40)
    assert not read_record(tmp_path / "r.json").collections["gw_c_x"].accepts(39)
    record.deleting("gw_c_x")  # a crash now may leave anything from 0 to 40 rows
    assert read_record(tmp_path / "r.json").collections["gw_c_x"].accepts(0)
    record.committed("gw_c_x", 30)
    entry = read_record(tmp_path / "r.json").collections["gw_c_x"]
    assert entry.accepts(31) and not entry.accepts(29)


def test_forget_and_reset(tmp_path):
    record = StoreRecord(tmp_path / "r.json")
    record.committed("a", 1)
    record.forget("a")
    assert read_record(tmp_path / "r.json").collections == {}
    record.reset({"b": 5})
    entry = read_record(tmp_path / "r.json").collections["b"]
    assert (entry.rows, entry.min_rows) == (5, 5) and entry.updated_at == pytest.approx(time.time(), abs=60)


def test_an_unreadable_record_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "r.json").write_text("{not json")
    with pytest.raises(RecordError, match=r"r\.json' is unreadable"):
        read_record(tmp_path / "r.json")
    (tmp_path / "r.json").write_text(json.dumps({"collections": {"a": {"rows": "x"}}}))
    with pytest.raises(RecordError, match="unreadable"):
        read_record(tmp_path / "r.json")


def _hold_shared(path, started, release):
    with WriteGate(path).writing():
        started.set()
        release.wait(10)


def test_the_write_gate_pauses_until_writers_finish(tmp_path):
    gate = tmp_path / "w.lock"
    started, release = multiprocessing.Event(), multiprocessing.Event()
    writer = multiprocessing.Process(target=_hold_shared, args=(gate, started, release))
    writer.start()
    try:
        assert started.wait(10)
        with pytest.raises(TimeoutError, match="did not pause"):
            with WriteGate(gate).paused(timeout_s=0.2):
                pass
        release.set()
        writer.join(10)
        with WriteGate(gate).paused(timeout_s=5):
            pass  # acquired once the writer is gone
    finally:
        release.set()
        writer.join(10)


def test_two_processes_records_never_undo_each_others_entries(tmp_path):
    # Two StoreRecord objects on one file stand for serve and `gateway ingest` in another process.
    serve, ingest = StoreRecord(tmp_path / "g.record.json"), StoreRecord(tmp_path / "g.record.json")
    serve.committed("gw_c_docs", 100)
    ingest.committed("gw_c_tickets", 5)  # its in-memory view predates serve's commit
    serve.deleting("gw_c_docs")
    serve.committed("gw_c_docs", 90)
    ingest.committed("gw_c_tickets", 7)  # must not write back docs = 100, which would read as damage
    entries = read_record(tmp_path / "g.record.json").collections
    assert (entries["gw_c_docs"].rows, entries["gw_c_docs"].min_rows, entries["gw_c_tickets"].rows) == (90, 90, 7)
    assert set(serve.snapshot().collections) == {"gw_c_docs", "gw_c_tickets"}
