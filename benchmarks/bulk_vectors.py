"""Bulk load of a corpus that brings its own vectors: `gateway ingest` of a JSONL file whose lines
carry their chunks and vectors, into the embedded milvus-lite store, then the same file again.

Writes `--chunks` chunks of synthetic text (60 words each from a fixed vocabulary, `--per-doc`
chunks per document) with random unit vectors of the collection's dimension (384, the bundled
model's), as lists of numbers or (`--encoding base64`) base64 of their little-endian float32 bytes,
runs the CLI in a fresh temporary store and reports chunks/s of the first load (every chunk written)
and of the re-run (every chunk unchanged: nothing written, nothing embedded). CPU seconds are the
CLI's and its children's (the JSONL reader process), user + system, start-up included.

`--index flat` keeps the collection exact, so the load is the writes alone; with the default
(`auto`), a load that takes the collection to 50,000 chunks or more ends with the HNSW build, which
the report gives apart (`index`). `--index flat,auto` runs both. With `--checkouts A B`, each run is
made once with each source tree's `gateway` package (e.g. /work/main and this checkout) on the same
corpus, alternating, for `--rounds` rounds, and medians close the output: an interleaved comparison on
a machine whose load changes. With `--served`, a `gateway serve` runs on the store first, so the CLI
writes through its milvus-lite server process (the engine's work on another core) instead of opening
the store embedded; CPU seconds are then the CLI's only. Usage:

    python benchmarks/bulk_vectors.py [--chunks 50000] [--per-doc 5] [--encoding list|base64] [--keep DIR]
        [--served] [--index flat|auto|hnsw[,...]] [--checkouts DIR ...] [--rounds 1]
"""

from __future__ import annotations

import argparse
import base64
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
from common import ROOT, free_port, start_gateway  # noqa: E402

TENANT = """
id: bulk
namespaces:
  bench:
    collections:
"""
COLLECTION = "      corpus_{index}: {{trust_tier: third-party, mode: hybrid, index: {{dense: {index}}}}}\n"
DIM = 384
WORDS = ("valve panel reset rotate flux pressure manual refund invoice outage status page billing card credit "
         "engine sensor calibration drift report ticket support network latency storage backup restore index "
         "vector search query result score chunk parent source title metadata filter tenant namespace").split()


def write_corpus(path: Path, chunks: int, per_doc: int, encoding: str = "list", seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    if encoding == "base64":
        encode = lambda vector: base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")  # noqa: E731
    else:
        encode = lambda vector: [round(float(x), 6) for x in vector]  # noqa: E731
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, chunks, per_doc):
            count = min(per_doc, chunks - start)
            vectors = rng.standard_normal((count, DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            words = rng.integers(0, len(WORDS), size=(count, 60))
            line = {"_id": f"doc-{start // per_doc}", "title": f"Document {start // per_doc}",
                    "chunks": [{"text": " ".join(WORDS[w] for w in row) + ".",
                                "vector": encode(vector)}
                               for row, vector in zip(words, vectors)]}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")


def run(command: list[str], env: dict[str, str]) -> tuple[float, float, dict]:
    """Wall seconds, CPU seconds (user + system of the CLI and its children: the machine's load does not
    change them) and the report."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # `python -m` puts the working directory first on the path: run in the checkout whose package is meant.
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=env["PYTHONPATH"])
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
    parser.add_argument("--encoding", default="list", choices=("list", "base64"),
                        help="vectors as lists of numbers, or base64 of their little-endian float32 bytes")
    parser.add_argument("--keep", type=Path, help="write the corpus and store here instead of a temporary folder")
    parser.add_argument("--served", action="store_true", help="load through a running `gateway serve`'s store server")
    parser.add_argument("--index", default="auto",
                        help="the collection's dense index, or several joined by commas: auto (the default) is FLAT "
                             "below 50,000 chunks and builds HNSW once a load takes it past them; flat times the "
                             "writes alone")
    parser.add_argument("--checkouts", nargs="+", type=Path, default=[ROOT],
                        help="source trees whose gateway package runs the CLI, alternating (default: this one)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    indexes = args.index.split(",")
    if unknown := set(indexes) - {"auto", "flat", "hnsw"}:
        parser.error(f"--index {','.join(sorted(unknown))}: allowed: auto, flat, hnsw")
    with tempfile.TemporaryDirectory() as scratch:
        folder = (args.keep or Path(scratch)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tenants").mkdir(exist_ok=True)
        (folder / "tenants" / "bulk.yaml").write_text(
            TENANT + "".join(COLLECTION.format(index=index) for index in indexes), encoding="utf-8")
        corpus = folder / "corpus.jsonl"
        started = time.perf_counter()
        write_corpus(corpus, args.chunks, args.per_doc, args.encoding)
        print(f"wrote {corpus} ({corpus.stat().st_size / 1e6:.0f} MB, vectors as {args.encoding}) in "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        results: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
        for round_ in range(1, args.rounds + 1):
            for index in indexes:
                for checkout in args.checkouts:
                    for old in folder.glob("bulk.*"):  # every run starts from an empty store
                        shutil.rmtree(old) if old.is_dir() else old.unlink()
                    env = {**os.environ, "GATEWAY_TENANTS_DIR": str(folder / "tenants"),
                           "GATEWAY_MILVUS_URI": str(folder / "bulk.db"), "PYTHONPATH": str(checkout.resolve())}
                    command = [sys.executable, "-m", "gateway.cli", "ingest", "--tenant", "bulk", "--namespace",
                               "bench", "--collection", f"corpus_{index}", str(corpus), "--json"]
                    server = start_gateway(env, free_port()) if args.served else None
                    try:
                        print(f"round {round_}, index {index}, {checkout}:")
                        results.setdefault((str(checkout), index), []).append(loads(command, env))
                    finally:
                        if server is not None:
                            server.send_signal(signal.SIGINT)  # drains, then stops its milvus-lite child
                            server.wait(timeout=60)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.rounds > 1 or len(args.checkouts) > 1:
        print(f"medians of {args.rounds} round(s), {args.chunks} chunks, vectors as {args.encoding}:")
        for (checkout, index), runs in results.items():
            load, cpu, rerun, rerun_cpu = (float(np.median(column)) for column in zip(*runs))
            print(f"  {index:5} {checkout}: load {args.chunks / load:,.0f} chunks/s ({load:.1f} s, {cpu:.1f} CPU s); "
                  f"re-run {args.chunks / rerun:,.0f} chunks/s ({rerun:.1f} s, {rerun_cpu:.1f} CPU s)")
    print(f"command: gateway ingest --tenant bulk --namespace bench --collection corpus_<index> corpus.jsonl --json"
          + ("  (beside `gateway serve`)" if args.served else ""))
    return 0


def loads(command: list[str], env: dict[str, str]) -> tuple[float, float, float, float]:
    """The load and the re-run: wall and CPU seconds of each."""
    figures = []
    for label in ("load", "re-run"):
        seconds, cpu, report = run(command, env)
        chunks = report["chunks"]
        index = (f", index {report['dense_index']} {report['index_seconds']:.1f} s" if report.get("dense_index")
                 else "")
        print(f"  {label}: {chunks} chunks in {seconds:.1f} s = {chunks / seconds:,.0f} chunks/s wall; "
              f"{cpu:.1f} CPU s = {chunks / cpu:,.0f} chunks per CPU second (written {report['chunks_written']}, "
              f"unchanged {report['chunks_unchanged']}, store {report['store_seconds']:.1f} s{index}, "
              f"embed {report['embed_seconds']:.1f} s, process start to end)")
        figures += [seconds, cpu]
    return figures[0], figures[1], figures[2], figures[3]


if __name__ == "__main__":
    raise SystemExit(main())
