"""How long `--prune` takes to delete removed sources: ingest N tiny Markdown files into a fresh
store, delete all but one, and time `gateway ingest --prune` (what `gateway sync` runs per seed corpus).

    python benchmarks/prune.py --sources 800

Prints one JSON line: the sources pruned, the prune command's wall time and the report's
store_seconds (time in store calls).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ["--tenant", "acme", "--namespace", "support", "--collection", "docs"]


def _ingest(env: dict[str, str], corpus: Path, *extra: str) -> tuple[dict, float]:
    command = [str(Path(sys.executable).parent / "gateway"), "ingest", *TARGET, str(corpus), "--json", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1]), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=800)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gateway-prune-") as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        for i in range(args.sources + 1):
            (corpus / f"note-{i:04d}.md").write_text(f"# Note {i}\n\nNote {i} says refunds take {i % 9 + 1} days.\n")
        env = {**os.environ, "GATEWAY_MILVUS_URI": str(Path(tmp) / "gateway.db"),
               "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), "GATEWAY_LITE_SERVER": "false"}
        ingested, ingest_s = _ingest(env, corpus)
        for i in range(1, args.sources + 1):
            (corpus / f"note-{i:04d}.md").unlink()
        pruned, prune_s = _ingest(env, corpus, "--prune")
    print(json.dumps({"sources_ingested": ingested["sources"], "ingest_s": round(ingest_s, 1),
                      "sources_pruned": pruned["sources_pruned"], "chunks_deleted": pruned["chunks_deleted"],
                      "prune_wall_s": round(prune_s, 1), "prune_store_s": pruned["store_seconds"]}))


if __name__ == "__main__":
    main()
