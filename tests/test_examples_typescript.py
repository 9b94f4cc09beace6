"""examples/typescript against a live gateway: `npm ci`, codegen, `tsc --strict`, and the scripts.

The scripts use stock clients (Apollo Client, urql with graphcache): `search` pages through a
search with the cursor; `cache-check` proves the cache-safe result shape (docs/clients.md).
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import KEYS, ROOT

NODE, NPM = shutil.which("node"), shutil.which("npm")
pytestmark = pytest.mark.skipif(NODE is None or NPM is None,
                                reason="node and npm are not on PATH; the TypeScript example needs Node 20+")
EXAMPLE = ROOT / "examples" / "typescript"


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(command, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A built copy (the codegen config reads ../../schema.graphql, so the schema comes along)."""
    root = tmp_path_factory.mktemp("ts")
    shutil.copy(ROOT / "schema.graphql", root / "schema.graphql")
    target = root / "examples" / "typescript"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("node_modules", "dist", "gql"))
    run([NPM, "ci", "--no-audit", "--no-fund", "--prefer-offline"], target, timeout=600)
    run([NPM, "run", "codegen"], target)
    run([NPM, "run", "build"], target)  # tsc with strict: true over the generated types
    return target


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def test_a_stock_client_pages_through_a_search(example, gateway):
    env = {"GATEWAY_URL": f"{gateway.url}/graphql", "GATEWAY_KEY": KEYS["acme-reader"]}
    result = last_json(run([NODE, "dist/search.js"], example, env))
    assert result == {"ok": True, "script": "search", "pages": 2, "hits": 6}


def test_apollo_and_urql_caches_keep_each_search_its_own_scores_and_collections(example, gateway):
    env = {"GATEWAY_URL": f"{gateway.url}/graphql", "GATEWAY_KEY": KEYS["acme-writer"]}
    result = last_json(run([NODE, "dist/cache-check.js"], example, env))
    assert result == {"ok": True, "script": "cache-check", "clients": ["apollo", "urql"]}
