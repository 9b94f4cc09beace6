"""Bulk load of a corpus that brings its own vectors: `gateway ingest` of a JSONL file whose lines
carry their chunks and vectors, into the embedded milvus-lite store, then the same file again.

Writes `--chunks` chunks of synthetic text (60 words each from a fixed vocabulary, `--per-doc`
chunks per document) with random unit vectors of the collection's dimension (384, the bundled
model's), runs the CLI in a fresh temporary store and reports chunks/s of the first load (every
chunk written) and of the re-run (every chunk unchanged: nothing written, nothing embedded).
With `--served`, a `gateway serve` runs on the store first, so the CLI writes through its milvus-lite
server process (the engine's work on another core) instead of opening the store embedded; CPU
seconds are then the CLI's only. `--index flat` keeps the collection exact, so the load is the writes
alone; with the default (`auto`), a load that takes the collection to 50,000 chunks or more ends
with the HNSW build. Usage:

    python benchmarks/bulk_vectors.py [--chunks 50000] [--per-doc 5] [--keep DIR] [--served] [--index flat]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port, start_gateway  # noqa: E402

TENANT = """
id: bulk
namespaces:
  bench:
    collections:
      corpus: {trust_tier: third-party, mode: hybrid, index: {dense: INDEX}}
"""
DIM = 384
WORDS = ("valve panel reset rotate flux pressure manual refund invoice outage status page billing card credit "
         "engine sensor calibration drift report ticket support network latency storage backup restore index "
         "vector search query result score chunk parent source title metadata filter tenant namespace").split()


def write_corpus(path: Path, chunks: int, per_doc: int, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, chunks, per_doc):
            count = min(per_doc, chunks - start)
            vectors = rng.standard_normal((count, DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            words = rng.integers(0, len(WORDS), size=(count, 60))
            line = {"_id": f"doc-{start // per_doc}", "title": f"Document {start // per_doc}",
                    "chunks": [{"text": " ".join(WORDS[w] for w in row) + ".",
                                "vector": [round(float(x), 6) for x in vector]}
                               for row, vector in zip(words, vectors)]}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")


def run(command: list[str], env: dict[str, str]) -> tuple[float, float, dict]:
    """Wall seconds, CPU seconds (user + system: the machine's load does not change them) and the report."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=50_000)
    parser.add_argument("--per-doc", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="write the corpus and store here instead of a temporary folder")
    parser.add_argument("--served", action="store_true", help="load through a running `gateway serve`'s store server")
    parser.add_argument("--index", default="auto", choices=("auto", "flat", "hnsw"),
                        help="the collection's dense index: auto (the default) is FLAT below 50,000 chunks and "
                             "builds HNSW once a load takes it past them; flat times the writes alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("bulk.*"):  # a kept folder's store from an earlier run: start empty
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        (folder / "tenants").mkdir(exist_ok=True)
        (folder / "tenants" / "bulk.yaml").write_text(TENANT.replace("INDEX", args.index), encoding="utf-8")
        corpus = folder / "corpus.jsonl"
        started = time.perf_counter()
        write_corpus(corpus, args.chunks, args.per_doc)
        print(f"wrote {corpus} ({corpus.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f} s",
              file=sys.stderr)
        env = {**os.environ, "GATEWAY_TENANTS_DIR": str(folder / "tenants"),
               "GATEWAY_MILVUS_URI": str(folder / "bulk.db")}
        command = [sys.executable, "-m", "gateway.cli", "ingest", "--tenant", "bulk", "--namespace", "bench",
                   "--collection", "corpus", str(corpus), "--json"]
        server = start_gateway(env, free_port()) if args.served else None
        try:
            loads(command, env)
        finally:
            if server is not None:
                server.send_signal(signal.SIGINT)  # drains, then stops its milvus-lite child
                server.wait(timeout=60)
    print(f"dense index: {args.index}; command: {' '.join(['gateway', *command[3:-2]])} corpus.jsonl --json"
          + ("  (beside `gateway serve`)" if args.served else ""))
    return 0


def loads(command: list[str], env: dict[str, str]) -> None:
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for label in ("load", "re-run"):
        seconds, cpu, report = run(command, env)
        chunks = report["chunks"]
        print(f"{label}: {chunks} chunks in {seconds:.1f} s = {chunks / seconds:,.0f} chunks/s wall; "
              f"{cpu:.1f} CPU s = {chunks / cpu:,.0f} chunks per CPU second (written {report['chunks_written']}, "
              f"unchanged {report['chunks_unchanged']}, store {report['store_seconds']:.1f} s, "
              f"embed {report['embed_seconds']:.1f} s, process start to end)")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    raise SystemExit(main())
