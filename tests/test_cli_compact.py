"""`gateway compact`: rewrites ingested collections, skips the rest, keeps search answering."""

import json

from gateway.cli import main
from tests.test_cli import workspace  # noqa: F401  (the shared tenant, corpus and store)


def test_compact_rewrites_ingested_collections(workspace, capsys):  # noqa: F811
    target = ["--tenant", "tiny", "--namespace", "beir", "--collection", "corpus"]
    assert main(["ingest", *target, str(workspace / "corpus.jsonl"), "--json"]) == 0
    capsys.readouterr()
    assert main(["compact", "--tenant", "tiny", "--namespace", "beir", "--json"]) == 0
    report = {line["collection"]: line for line in json.loads(capsys.readouterr().out)}
    assert report["beir/corpus"]["rows"] == 3
    assert report["beir/half-a"]["skipped"] == "not ingested"
    assert main(["compact", *target]) == 0
    assert "beir/corpus: 3 rows rewritten" in capsys.readouterr().out
    assert main(["search", *target, "heart attack prevention", "--limit", "1"]) == 0
    assert "[d1/0]" in capsys.readouterr().out
    assert main(["compact", "--tenant", "tiny", "--namespace", "beir", "--collection", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
