"""The command line: check-config, ingest, search and eval on a tiny BEIR-style collection."""

import json

import pytest

from gateway.cli import main

TENANT = """
id: tiny
namespaces:
  beir:
    collections:
      corpus: {trust_tier: third-party, mode: hybrid, fusion: rrf, limit: 5}
      half-a: {trust_tier: third-party, mode: hybrid, fusion: rrf, limit: 5}
      half-b: {trust_tier: third-party, mode: hybrid, fusion: rrf, limit: 5}
pipelines:
  rerank:
    stages:
      - rerank: {chain: [{lateInteraction: {topK: 3, blend: weighted, weight: 0.5}}]}
"""


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    tenants = tmp_path / "tenants"
    tenants.mkdir()
    (tenants / "tiny.yaml").write_text(TENANT)
    docs = [{"_id": "d1", "title": "Aspirin", "text": "Aspirin reduces the risk of heart attack.", "metadata": {}},
            {"_id": "d2", "title": "Vitamin C", "text": "Vitamin C does not prevent the common cold.", "metadata": {}},
            {"_id": "d3", "title": "Exercise", "text": "Regular exercise lowers blood pressure.", "metadata": {}}]
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in [
        {"_id": "q1", "text": "does aspirin prevent heart attacks"}, {"_id": "q2", "text": "colds and vitamin c"}]) + "\n")
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    monkeypatch.setenv("GATEWAY_TENANTS_DIR", str(tenants))
    monkeypatch.setenv("GATEWAY_MILVUS_URI", str(tmp_path / "cli.db"))
    return tmp_path


def test_check_config_reports_ok_and_problems(workspace, capsys, monkeypatch):
    assert main(["check-config"]) == 0
    assert "ok: 1 tenant(s)" in capsys.readouterr().out
    (workspace / "tenants" / "bad.yaml").write_text("id: bad\nnamespaces: {n: {collections: {c: {trust_tier: secret}}}}\n")
    assert main(["check-config"]) == 1
    out = capsys.readouterr().out
    assert "bad.yaml: namespaces.n.collections.c.trust_tier:" in out and "'secret'" in out


def test_check_config_takes_a_folder_or_a_file(workspace, capsys, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "t.yaml").write_text(TENANT.replace("id: tiny", "id: other").replace("limit: 5}", "limit: 500}", 1))
    assert main(["check-config", str(other)]) == 1
    out = capsys.readouterr().out
    assert "limit 500 is above GATEWAY_MAX_LIMIT 100" in out
    assert main(["check-config", str(workspace / "tenants" / "tiny.yaml")]) == 0
    assert "ok: 1 tenant(s)" in capsys.readouterr().out


def test_ingest_reports_unreadable_files_with_the_reason_and_exits_2(workspace, capsys):
    from tests.documents import write_pdf

    folder = workspace / "mixed"
    folder.mkdir()
    (folder / "ok.md").write_text("# Ok\n\nAspirin and heart attacks.")
    write_pdf(folder / "manual.pdf", ["Vitamin C and colds."])
    (folder / "scan.pdf").write_bytes(b"%PDF-1.4 nothing here")
    target = ["--tenant", "tiny", "--namespace", "beir", "--collection", "half-a"]
    assert main(["ingest", *target, str(folder), "--json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["sources"] == 2 and report["chunks_written"] == 2
    [unread] = report["unreadable"]
    assert unread["path"].endswith("scan.pdf") and unread["reason"].startswith("not a readable PDF")
    assert "1 file(s) could not be read and were not ingested:" in captured.err and "scan.pdf" in captured.err


def test_ingest_prune_with_an_unreadable_file_writes_the_readable_ones_and_prunes_nothing(workspace, capsys):
    # The documents stream through ingest (a million chunks of vectors are gigabytes held at once);
    # whether to prune is decided once every file was read.
    from tests.documents import write_pdf

    folder = workspace / "mixed"
    folder.mkdir()
    (folder / "ok.md").write_text("# Ok\n\nAspirin and heart attacks.")
    (folder / "gone.md").write_text("# Gone\n\nRemoved from the folder later.")
    target = ["--tenant", "tiny", "--namespace", "beir", "--collection", "half-b"]
    assert main(["ingest", *target, str(folder), "--json"]) == 0
    capsys.readouterr()
    (folder / "gone.md").unlink()
    (folder / "ok.md").write_text("# Ok\n\nAspirin and heart attacks, edited.")
    write_pdf(folder / "manual.pdf", ["Vitamin C and colds."])
    (folder / "scan.pdf").write_bytes(b"%PDF-1.4 nothing here")
    assert main(["ingest", *target, str(folder), "--prune", "--json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert (report["sources"], report["chunks_written"], report["sources_pruned"]) == (2, 2, 0)
    assert "nothing was pruned" in captured.err and "scan.pdf" in captured.err
    (folder / "scan.pdf").unlink()
    assert main(["ingest", *target, str(folder), "--prune", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["chunks_written"], report["chunks_unchanged"], report["sources_pruned"]) == (0, 2, 1)


def test_ingest_off_a_terminal_prints_progress_lines_for_the_windows_and_the_prune(workspace, capsys, monkeypatch):
    # A cron job or a pipe has no progress bar (tqdm draws only on a terminal): lines on stderr instead.
    monkeypatch.setattr("gateway.cli.PROGRESS_S", 0.0)
    target = ["--tenant", "tiny", "--namespace", "beir", "--collection", "corpus"]
    assert main(["ingest", *target, str(workspace / "corpus.jsonl"), "--json"]) == 0
    err = capsys.readouterr().err
    assert "ingest beir/corpus: 3 of 3 documents (chunks written 3, unchanged 0)" in err
    empty = workspace / "empty.jsonl"
    empty.write_text("")
    assert main(["ingest", *target, str(empty), "--prune", "--json"]) == 0
    err = capsys.readouterr().err
    assert "ingest beir/corpus: prune chunks 3 rows" in err and "ingest beir/corpus: prune parents 3 rows" in err


def test_ingest_search_eval_round_trip(workspace, capsys):
    target = ["--tenant", "tiny", "--namespace", "beir", "--collection", "corpus"]
    assert main(["ingest", *target, str(workspace / "corpus.jsonl"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["chunks_written"] == 3
    assert main(["ingest", *target, str(workspace / "corpus.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks_unchanged"] == 3
    assert main(["search", *target, "heart attack prevention", "--limit", "1"]) == 0
    assert "[d1/0]" in capsys.readouterr().out
    assert main(["eval", *target, "--queries", str(workspace / "queries.jsonl"), "--qrels",
                 str(workspace / "qrels.tsv"), "--mode", "dense,sparse,hybrid", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert set(metrics) == {"dense", "sparse", "hybrid"}
    assert metrics["hybrid"]["ndcg@10"] == 1.0 and metrics["hybrid"]["queries"] == 2


def test_unknown_tenant_is_a_clear_error(workspace, capsys):
    assert main(["search", "--tenant", "nobody", "--namespace", "beir", "--collection", "corpus", "x"]) == 2
    assert "tenant 'nobody' is not configured" in capsys.readouterr().err


def test_federated_eval_over_split_collections(workspace, capsys):
    lines = (workspace / "corpus.jsonl").read_text().splitlines()
    (workspace / "a.jsonl").write_text(lines[0] + "\n")
    (workspace / "b.jsonl").write_text("\n".join(lines[1:]) + "\n")
    for name, part in (("half-a", "a.jsonl"), ("half-b", "b.jsonl")):
        assert main(["ingest", "--tenant", "tiny", "--namespace", "beir", "--collection", name,
                     str(workspace / part), "--json"]) == 0
    capsys.readouterr()
    common = ["--tenant", "tiny", "--namespace", "beir", "--queries", str(workspace / "queries.jsonl"),
              "--qrels", str(workspace / "qrels.tsv"), "--mode", "hybrid", "--json"]
    scores = {}
    for merge in ("rrf", "dbsf", "signals"):
        assert main(["eval", *common, "--collections", "half-a,half-b", "--merge", merge]) == 0
        scores[merge] = json.loads(capsys.readouterr().out)["hybrid"]["ndcg@10"]
    # Rank merges put each collection's best hit level with the others; the signal merge compares
    # raw scores across collections, so it ranks like the single collection does.
    assert scores["signals"] == 1.0 and 0 < scores["rrf"] <= 1.0 and 0 < scores["dbsf"] <= 1.0
    assert main(["eval", *common, "--federated"]) == 2  # 'corpus' in the namespace was never ingested
    assert "beir/corpus of tenant tiny not ingested" in capsys.readouterr().err


def test_eval_with_a_pipeline_and_token_vectors_from_ingest(workspace, capsys):
    target = ["--tenant", "tiny", "--namespace", "beir", "--collection", "corpus"]
    assert main(["ingest", *target, str(workspace / "corpus.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["token_vectors_written"] == 3  # the tenant reranks by them
    assert main(["eval", *target, "--queries", str(workspace / "queries.jsonl"), "--qrels",
                 str(workspace / "qrels.tsv"), "--pipeline", "rerank", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["hybrid"]["ndcg@10"] == 1.0 and metrics["hybrid"]["queries"] == 2
    assert any(d.name.startswith("gw_t_") for d in (workspace / "cli.db" / "collections").iterdir())
    assert main(["eval", *target, "--queries", str(workspace / "queries.jsonl"), "--qrels",
                 str(workspace / "qrels.tsv"), "--pipeline", "deep"]) == 2
    assert "pipeline 'deep' is not defined for tenant 'tiny'; known: rerank" in capsys.readouterr().err


def test_eval_limit_sets_the_depth_callers_get(workspace, capsys):
    target = ["--tenant", "tiny", "--namespace", "beir", "--collection", "corpus"]
    assert main(["ingest", *target, str(workspace / "corpus.jsonl"), "--json"]) == 0
    capsys.readouterr()
    common = [*target, "--queries", str(workspace / "queries.jsonl"), "--qrels", str(workspace / "qrels.tsv"),
              "--mode", "sparse", "--json"]
    assert main(["eval", *common, "--limit", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["sparse"]["ndcg@10"] == 1.0  # the one hit is the right one
    assert main(["eval", *common, "--limit", "0"]) == 2
    assert "limit 0 is below 1" in capsys.readouterr().err


def test_verify_backup_and_restore(workspace, capsys):
    ingest = ["ingest", "--tenant", "tiny", "--namespace", "beir", "--collection", "corpus"]
    assert main([*ingest, str(workspace / "corpus.jsonl")]) == 0
    capsys.readouterr()
    assert main(["verify", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    corpus = next(c for c in report["collections"] if c["collection"] == "tiny:beir/corpus")
    assert report["ok"] and corpus["chunks"] == 3 and corpus["problems"] == {}

    assert main(["backup", str(workspace / "bk")]) == 0
    taken = json.loads(capsys.readouterr().out)  # JSON, like restore's
    assert taken["rows"] == 9 and taken["path"] == str(workspace / "bk")  # 3 chunks, 3 parents, 3 token-vector rows
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(str(workspace / "cli.db"))  # as if the gateway were stopped
    assert main(["restore", str(workspace / "bk")]) == 0
    restored = json.loads(capsys.readouterr().out)
    assert restored["rows"] == 9 and len(restored["kept_aside"]) == 2  # store and record (no legacy tokens dir)
    assert main(["verify"]) == 0
    assert "no damage found" in capsys.readouterr().out


def test_verify_exits_1_on_damage(workspace, capsys):
    from gateway.settings import Settings
    from gateway.runtime import open_store

    assert main(["ingest", "--tenant", "tiny", "--namespace", "beir", "--collection", "corpus",
                 str(workspace / "corpus.jsonl")]) == 0
    settings = Settings()
    store = open_store(settings, dim=384)
    try:
        from gateway.storage.schema import Scope

        name = Scope("tiny", "beir", "corpus").chunk_collection
        row = store.guard.get(name, ids=["beir/d1/0"], output_fields=["*"])[0]
        row.pop("sparse", None)
        store.guard.upsert(name, [{**row, "text": "tampered"}])
        store.guard.flush(name)
    finally:
        store.close()
    capsys.readouterr()
    assert main(["verify"]) == 1
    out = capsys.readouterr().out
    assert "tiny:beir/corpus: chunks=3" in out and "content_hash_mismatch=1" in out and "beir/d1/0" in out


def test_backup_of_a_milvus_server_points_to_its_own_tooling(workspace, capsys, monkeypatch):
    monkeypatch.setenv("GATEWAY_MILVUS_URI", "http://127.0.0.1:19530")
    assert main(["backup", str(workspace / "bk")]) == 2
    assert "milvus-backup" in capsys.readouterr().err


def test_restore_of_a_missing_backup_is_a_storage_error(workspace, capsys):
    assert main(["restore", str(workspace / "nothing")]) == 75
    assert "is not a complete backup" in capsys.readouterr().err


def test_check_config_refuses_partition_key_on_a_milvus_lite_path(workspace, capsys, monkeypatch):
    (workspace / "tenants" / "tiny.yaml").write_text(TENANT.replace("id: tiny\n", "id: tiny\nisolation: partition_key\n"))
    assert main(["check-config"]) == 1
    out = capsys.readouterr().out
    assert "GATEWAY_MILVUS_URI: tenant 'tiny' sets isolation: partition_key" in out
    # Behind a server URI the engine is unknown until it is reached: checked when serving.
    monkeypatch.setenv("GATEWAY_MILVUS_URI", "http://127.0.0.1:19530")
    assert main(["check-config"]) == 0


def _ingested_and_released(workspace) -> None:
    from milvus_lite.server_manager import server_manager_instance

    assert main(["ingest", "--tenant", "tiny", "--namespace", "beir", "--collection", "corpus",
                 str(workspace / "corpus.jsonl")]) == 0
    server_manager_instance.release_server(str(workspace / "cli.db"))  # as if the gateway were stopped


def _flip(path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _chunk_dir(workspace):
    return next((workspace / "cli.db" / "collections").glob("gw_c_tiny__beir__corpus_*"))


@pytest.mark.parametrize("damage", ["flipped data bytes", "deleted data file", "truncated data file",
                                    "truncated record", "truncated index file"])
def test_verify_exits_1_naming_the_file_on_damage_found_before_opening(workspace, capsys, damage):
    _ingested_and_released(workspace)
    data = next((_chunk_dir(workspace) / "partitions").rglob("*.parquet"))
    index = next((_chunk_dir(workspace) / "partitions").rglob("*.idx"))
    damaged = {"flipped data bytes": data, "deleted data file": data, "truncated data file": data,
               "truncated record": workspace / "cli.record.json", "truncated index file": index}[damage]
    if damage == "deleted data file":
        damaged.unlink()
    elif damage == "flipped data bytes":
        _flip(damaged)
    else:
        _truncate(damaged)
    capsys.readouterr()
    assert main(["verify"]) == 1  # damage: waiting and re-running (exit 75) would not help
    out = capsys.readouterr().out
    assert f"{damaged}" in out and "DAMAGED" in out and "retry" not in out, out
    assert main(["verify", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and damaged.name in report["refused"]


def test_a_truncated_index_file_is_named_as_damage_with_the_way_to_rebuild_it(workspace, capsys):
    _ingested_and_released(workspace)
    index = next((_chunk_dir(workspace) / "partitions").rglob("*.idx"))
    _truncate(index)
    assert main(["search", "--tenant", "tiny", "--namespace", "beir", "--collection", "corpus", "aspirin"]) == 1
    err = capsys.readouterr().err
    assert f"{index}: is damaged" in err and "truncated" in err and "retry in 5 s" not in err, err
    index.unlink()  # what the message says to do: milvus-lite rebuilds it from the data file
    assert main(["verify"]) == 0
    assert "no damage found" in capsys.readouterr().out


def test_an_unreadable_record_names_the_re_adoption_that_keeps_the_data(workspace, capsys):
    _ingested_and_released(workspace)
    record = workspace / "cli.record.json"
    _truncate(record)
    assert main(["verify"]) == 1
    out = capsys.readouterr().out
    assert f"mv {record} {record}.unreadable" in out and "run `gateway verify`" in out
    assert "gateway restore" in out and "--accept-empty" in out  # the ways that lose data, after it


def _tamper_text(workspace) -> None:
    """A chunk's text changed behind the gateway's back: only `verify`'s content hashes see it."""
    from gateway.runtime import open_store
    from gateway.settings import Settings
    from gateway.storage.schema import Scope

    store = open_store(Settings(), dim=384)
    try:
        name = Scope("tiny", "beir", "corpus").chunk_collection
        row = store.guard.get(name, ids=["beir/d1/0"], output_fields=["*"])[0]
        row.pop("sparse", None)
        store.guard.upsert(name, [{**row, "text": "tampered"}])
        store.guard.flush(name)
    finally:
        store.close()


SEARCH = ["search", "--tenant", "tiny", "--namespace", "beir", "--collection", "corpus", "aspirin"]


def test_a_store_copied_without_its_record_is_refused_until_verify_records_it(workspace, capsys):
    _ingested_and_released(workspace)
    (workspace / "cli.record.json").unlink()
    assert main(SEARCH) == 1
    err = capsys.readouterr().err
    assert "record" in err and "is missing" in err and "Run `gateway verify` first" in err, err
    assert not (workspace / "cli.record.json").exists()
    assert main(["verify"]) == 0
    out = capsys.readouterr().out
    assert "no damage found" in out and "the store had no record: recorded it as it is now" in out, out
    assert main(SEARCH) == 0
    assert "[d1/0]" in capsys.readouterr().out


def test_a_damaged_store_without_its_record_is_recorded_only_with_adopt(workspace, capsys):
    _ingested_and_released(workspace)
    _tamper_text(workspace)
    (workspace / "cli.record.json").unlink()
    capsys.readouterr()
    assert main(["verify"]) == 1
    out = capsys.readouterr().out
    assert "content_hash_mismatch=1" in out and "was NOT recorded because of the damage above" in out, out
    assert not (workspace / "cli.record.json").exists()
    assert main(["verify", "--adopt", "--json"]) == 1  # still damaged, but now recorded to repair
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and sum(report["adopted"].values()) == 9  # chunks, parents, token vectors
    assert main(SEARCH) == 0


@pytest.mark.parametrize("read_ahead", [False, True], ids=["read-here", "read-ahead"])
def test_ingest_of_jsonl_with_vectors_embeds_nothing_and_is_idempotent(workspace, capsys, monkeypatch, read_ahead):
    from gateway.ingest import jsonl_reader

    if read_ahead:  # the file's reader is started before the store opens (jsonl_reader.ReadAhead)
        monkeypatch.setattr(jsonl_reader, "READ_AHEAD_BYTES", 0)
    lines = [{"_id": "v1", "title": "Valves", "chunks": [{"text": "Rotate the flux valve.", "vector": [1.0] + [0.0] * 383},
                                                         {"text": "Reset the panel.", "vector": [0.0, 1.0] + [0.0] * 382}]},
             {"_id": "v2", "text": "Refunds take five days.", "vector": [0.0, 0.0, 1.0] + [0.0] * 381}]
    (workspace / "vectors.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    target = ["ingest", "--tenant", "tiny", "--namespace", "beir", "--collection", "corpus"]
    assert main([*target, str(workspace / "vectors.jsonl"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["chunks_written"], report["parents_written"], report["embed_seconds"]) == (3, 2, 0.0)
    assert main([*target, str(workspace / "vectors.jsonl"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["chunks_written"], again["chunks_unchanged"]) == (0, 3)
    assert main(["search", *target[1:], "flux valve", "--mode", "sparse"]) == 0
    assert "v1" in capsys.readouterr().out
    (workspace / "wrong.jsonl").write_text(json.dumps({"_id": "w", "text": "t", "vector": [1.0, 0.0]}) + "\n")
    assert main([*target, str(workspace / "wrong.jsonl")]) != 0
    assert "vector of document 'w' chunk 0 has 2 dimensions; collection beir/corpus stores 384" in capsys.readouterr().err


def test_ingest_freezes_start_up_for_the_collector_and_restores_its_settings(workspace, capsys, monkeypatch):
    import gc

    from gateway.cli import INGEST_GC_THRESHOLD
    from gateway.ingest import sync

    seen = []
    real = sync.ingest_documents

    def spy(*args, **kwargs):
        seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
        return real(*args, **kwargs)

    monkeypatch.setattr(sync, "ingest_documents", spy)
    gc.unfreeze()  # what an earlier test's app froze
    before = gc.get_threshold()
    assert main(["ingest", "--tenant", "tiny", "--namespace", "beir", "--collection", "corpus",
                 str(workspace / "corpus.jsonl")]) == 0
    assert seen == [(INGEST_GC_THRESHOLD, True)]
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_file_loaded_by_the_reader_child_re_runs_unchanged_when_read_here_and_back(workspace, capsys, monkeypatch):
    """The child scales and hashes the vectors as ingest does: the same file read either way stores the same
    vectors under the same content hashes, so neither run after the first writes anything."""
    import numpy as np

    from gateway.ingest import jsonl_reader

    rng = np.random.default_rng(11)
    lines = [{"_id": f"v{i}", "title": f"T{i}", "chunks": [{"text": f"chunk {i}.{j} about valves",
                                                            "vector": (rng.standard_normal(384) * 3).tolist()}
                                                           for j in range(3)]} for i in range(40)]
    (workspace / "vectors.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    target = ["ingest", "--tenant", "tiny", "--namespace", "beir", "--collection", "corpus",
              str(workspace / "vectors.jsonl"), "--json"]
    reports = []
    for ahead in (True, False, True):
        monkeypatch.setattr(jsonl_reader, "READ_AHEAD_BYTES", 0 if ahead else 1 << 40)
        assert main(target) == 0
        report = json.loads(capsys.readouterr().out)
        reports.append((report["chunks_written"], report["chunks_unchanged"]))
    assert reports == [(120, 0), (0, 120), (0, 120)]
