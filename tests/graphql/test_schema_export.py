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


def test_every_graphql_example_in_the_docs_validates_against_the_schema():
    import re

    from graphql import DocumentNode, FragmentDefinitionNode, build_schema as from_sdl, parse, validate

    schema = from_sdl((ROOT / "schema.graphql").read_text(encoding="utf-8"))
    problems, checked = [], 0
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```graphql\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            definitions = parse(block).definitions
            fragments = [d for d in definitions if isinstance(d, FragmentDefinitionNode)]
            for operation in (d for d in definitions if not isinstance(d, FragmentDefinitionNode)):
                checked += 1  # a block may show several operations one after another
                for error in validate(schema, DocumentNode(definitions=(operation, *fragments))):
                    problems.append(f"{path.name}: {error.message}")
    assert checked >= 5 and problems == []
