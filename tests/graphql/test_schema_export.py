"""schema.graphql at the root is exactly what the code exports."""

from pathlib import Path

from gateway.cli import main
from gateway.graphql.schema import build_schema
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schema_matches_code():
    exported = build_schema(Settings()).as_str() + "\n"
    committed = (ROOT / "schema.graphql").read_text(encoding="utf-8")
    assert committed == exported, "schema.graphql is stale: run `gateway export-schema --output schema.graphql`"


def test_export_schema_command_writes_the_sdl(tmp_path):
    out = tmp_path / "schema.graphql"
    assert main(["export-schema", "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == (ROOT / "schema.graphql").read_text(encoding="utf-8")
