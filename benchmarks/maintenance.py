"""Bulk maintenance of a large collection, as an operator runs it: re-syncing every unchanged source,
deleting a tenth of the sources, and deleting every source, each a `gateway ingest` process.

Builds a store of `--chunks` chunks in `--sources` sources (random unit 384-d vectors, 60-word
synthetic texts) through the bring-your-own-vectors bulk path (`gateway ingest` of a JSONL of
vectors, as benchmarks/bulk_vectors.py), then times, each as its own process with start-up:

- re-sync: `gateway ingest corpus.jsonl` again; every chunk is unchanged, nothing is written;
- delete 10%: `gateway ingest --prune` of the same file without every tenth source;
- delete all: `gateway ingest --prune` of an empty JSONL file.

Per step: wall seconds, CPU seconds (the process's user + system, which the machine's load does not
change) and peak RSS (`wait4`), the report's counts, and the progress lines the command printed on
stderr (echoed with the seconds since the step started). With `--served`, a `gateway serve` runs on the
store first, the commands write through its milvus-lite server, and a search (dense, by vector) is
sent every `--probe-s` seconds during each step: its p50, max and failures say whether the service
kept serving. Usage:

    python benchmarks/maintenance.py [--chunks 100000] [--sources 10000] [--keep DIR] [--served] [--index flat]

With `--store`, a store kept by benchmarks/scale.py --keep instead (a copy: the steps delete its
sources; `--chunks` and `--sources` as it holds them, for the report): nothing is written or loaded
first, its tenant file is replaced by one with this benchmark's keys, and only the steps that need no
corpus run (`delete-all`, `api-delete`):

    cp -a /tmp/million/. /tmp/copy/ && python benchmarks/maintenance.py --store /tmp/copy/scale-1000000.db \
        --chunks 1000000 --sources 100000 --served --steps delete-all
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bulk_vectors import DIM, WORDS  # noqa: E402
from common import ROOT, free_port, percentile, start_gateway, tree_cpu_seconds  # noqa: E402

KEY = "maintenance-bench-reader"
WRITER = "maintenance-bench-writer"
TENANT = """
id: {tenant}
api_keys:
  - {{sha256: "{digest}", role: reader}}
  - {{sha256: "{writer}", role: writer}}
namespaces:
  bench:
    collections:
      corpus: {{trust_tier: third-party, mode: hybrid, index: {{dense: {index}}}}}
"""
DELETE = ('mutation($s: String!) { deleteSource(namespace: "bench", collection: "corpus", sourceId: $s) '
          '{ __typename } }')
DELETE_MANY = ('mutation($s: [String!]!) { deleteSources(namespace: "bench", collection: "corpus", sourceIds: $s) '
               '{ missing } }')
SEARCH = ('query($v: [Float!]) { search(input: {namespace: "bench", collection: "corpus", mode: DENSE, '
          'vector: $v, limit: 5}) { __typename } }')


def write_corpus(path: Path, chunks: int, sources: int, seed: int = 7) -> None:
    """`sources` documents of chunks // sources chunks each (the first ones one more when it does not divide)."""
    rng = np.random.default_rng(seed)
    base, extra = divmod(chunks, sources)
    with path.open("wb") as out:
        for n in range(sources):
            count = base + (n < extra)
            vectors = rng.standard_normal((count, DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            words = rng.integers(0, len(WORDS), size=(count, 60))
            line = {"_id": f"doc-{n}", "title": f"Document {n}",
                    "chunks": [{"text": " ".join(WORDS[w] for w in row) + ".", "vector": vector}
                               for row, vector in zip(words, vectors)]}
            out.write(orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE))


def without_every(source: Path, target: Path, nth: int) -> int:
    """`source` without every `nth` line (a tenth of the sources at 10); returns the lines dropped."""
    dropped = 0
    with source.open(encoding="utf-8") as lines, target.open("w", encoding="utf-8") as out:
        for n, line in enumerate(lines):
            if n % nth == nth - 1:
                dropped += 1
            else:
                out.write(line)
    return dropped


def step(label: str, command: list[str], env: dict[str, str], server: int | None = None) -> dict:
    """Run one gateway command; its stderr lines echoed as they come; wall, CPU and peak RSS from wait4;
    with `server` (a `gateway serve` pid), the CPU seconds its process tree spent meanwhile too."""
    server_cpu = tree_cpu_seconds(server) if server is not None else 0.0
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def echo() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip())
            print(f"  [{label} {time.perf_counter() - started:6.1f} s] {line.rstrip()}", file=sys.stderr, flush=True)

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    reader.join(timeout=5)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({process.returncode}):\n" + "\n".join(lines[-30:]))
    report = json.loads(output.strip().splitlines()[-1])
    served = {"server_cpu_s": tree_cpu_seconds(server) - server_cpu} if server is not None else {}
    return {**served, "wall_s": seconds, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024,
            "progress_lines": sum(1 for line in lines if line.startswith("ingest ")),
            **{k: report[k] for k in ("sources", "chunks", "chunks_written", "chunks_unchanged", "chunks_deleted",
                                      "sources_pruned", "store_seconds")}}


class Prober:
    """One dense search by vector every `every_s` seconds while a step runs: latency and failures."""

    def __init__(self, port: int, every_s: float) -> None:
        import httpx

        self._http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                                  headers={"Authorization": f"Bearer {KEY}"})
        self._every = every_s
        self._vector = [1.0 / DIM ** 0.5] * DIM
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._http.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                answer = self._http.post("/graphql", json={"query": SEARCH, "variables": {"v": self._vector}})
                body = answer.json()
                if answer.status_code != 200 or body.get("errors"):
                    self.failures.append(f"{answer.status_code} {str(body.get('errors'))[:200]}")
            except Exception as exc:  # noqa: BLE001 - a probe reports every kind of failure
                self.failures.append(f"{type(exc).__name__}: {exc}")
            else:
                self.latencies.append((time.perf_counter() - started) * 1000)
            self._stop.wait(max(0.0, self._every - (time.perf_counter() - started)))

    def summary(self) -> dict:
        return {"searches": len(self.latencies) + len(self.failures), "failed": len(self.failures),
                "search_p50_ms": percentile(self.latencies, 0.5),
                "search_max_ms": max(self.latencies, default=float("nan")), "first_failures": self.failures[:3]}


def api_deletes(port: int, sources: int, count: int, batched: int, server: int) -> dict:
    """`count` deleteSource calls one after another, then `batched` more sources in deleteSources calls of 500
    (all of them sources the delete-tenth step would prune): seconds and the gateway's CPU per source, each way."""
    import httpx

    tenth = [f"doc-{n}" for n in range(9, sources, 10)]
    singles, many = tenth[:count], tenth[count:count + batched]
    out: dict = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600,
                      headers={"Authorization": f"Bearer {WRITER}"}) as http:
        for label, query, calls in (("deleteSource", DELETE, [{"s": s} for s in singles]),
                                    ("deleteSources", DELETE_MANY,
                                     [{"s": many[i:i + 500]} for i in range(0, len(many), 500)])):
            cpu, seconds = tree_cpu_seconds(server), []
            for n, variables in enumerate(calls):
                started = time.perf_counter()
                answer = http.post("/graphql", json={"query": query, "variables": variables})
                seconds.append(time.perf_counter() - started)
                if answer.status_code != 200 or answer.json().get("errors"):
                    sys.exit(f"{label} failed: {answer.status_code} {answer.text[:500]}")
                print(f"  [api-delete] {label}: {n + 1} of {len(calls)} calls, {sum(seconds):.1f} s", file=sys.stderr,
                      flush=True)
            deleted = len(singles) if label == "deleteSource" else len(many)
            if deleted:
                out[label] = {"sources": deleted, "calls": len(calls), "wall_s": sum(seconds),
                              "s_a_source": sum(seconds) / deleted,
                              "server_cpu_s_a_source": (tree_cpu_seconds(server) - cpu) / deleted}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--sources", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="write the corpus and store here instead of a temporary folder")
    parser.add_argument("--served", action="store_true", help="run the commands beside a `gateway serve`, probing it")
    parser.add_argument("--probe-s", type=float, default=1.0, help="seconds between probe searches (--served)")
    parser.add_argument("--steps", nargs="+", default=["resync", "api-delete", "delete-tenth", "delete-all"],
                        choices=["resync", "api-delete", "delete-tenth", "delete-all"],
                        help="api-delete runs with --served only")
    parser.add_argument("--api-batch-deletes", type=int, default=500,
                        help="sources then deleted by deleteSources calls of 500 (--served; from the same tenth)")
    parser.add_argument("--index", default="auto", choices=("auto", "flat"),
                        help="the collection's dense index: auto (HNSW past 50,000 chunks) or flat (no graph builds)")
    parser.add_argument("--store", type=Path,
                        help="a copy of a store kept by scale.py --keep (scale-<n>.db, tenants/ beside it) to run the "
                             "steps on, instead of writing and loading a corpus")
    parser.add_argument("--api-deletes", type=int, default=50,
                        help="sources deleted one deleteSource call at a time (--served; from the tenth the "
                             "prune deletes, so the later steps' counts stay the same)")
    args = parser.parse_args()
    tenant = "scale" if args.store else "bulk"
    if args.store and {"resync", "delete-tenth"} & set(args.steps):
        parser.error("--store runs only delete-all and api-delete (the others need the corpus file)")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.store.parent if args.store else args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("maint.*"):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        (folder / "tenants").mkdir(exist_ok=True)
        digest = hashlib.sha256(KEY.encode()).hexdigest()
        writer = hashlib.sha256(WRITER.encode()).hexdigest()
        (folder / "tenants" / f"{tenant}.yaml").write_text(
            TENANT.format(tenant=tenant, digest=digest, writer=writer, index=args.index), encoding="utf-8")
        corpus, tenth, empty = folder / "corpus.jsonl", folder / "corpus-90.jsonl", folder / "empty.jsonl"
        started = time.perf_counter()
        made = folder / "corpus.made"  # a kept folder's corpus of the same size is used again
        if not args.store and not (made.exists() and made.read_text() == f"{args.chunks} {args.sources}"
                                   and tenth.exists()):
            write_corpus(corpus, args.chunks, args.sources)
            without_every(corpus, tenth, 10)
            made.write_text(f"{args.chunks} {args.sources}")
        dropped = args.sources // 10
        empty.write_text("", encoding="utf-8")
        if not args.store:
            print(f"wrote {corpus} ({corpus.stat().st_size / 1e6:.0f} MB, {args.sources:,} sources) and {tenth.name} "
                  f"(without {dropped:,} sources) in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        store = args.store or folder / "maint.db"
        env = {**os.environ, "GATEWAY_TENANTS_DIR": str(folder / "tenants"), "GATEWAY_MILVUS_URI": str(store),
               "GATEWAY_INGEST_DEMO_ON_START": "false", "PYTHONPATH": str(ROOT)}
        ingest = [sys.executable, "-m", "gateway.cli", "ingest", "--tenant", tenant, "--namespace", "bench",
                  "--collection", "corpus", "--json"]
        print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        result: dict = {"chunks": args.chunks, "sources": args.sources}
        if not args.store:
            result["load"] = step("load", [*ingest, str(corpus)], env)
            print(json.dumps({"load": _rounded(result["load"])}), flush=True)
        server = None
        if args.served:
            port = free_port()
            server = start_gateway(env, port)
        try:
            commands = {"resync": [*ingest, str(corpus)], "delete-tenth": [*ingest, "--prune", str(tenth)],
                        "delete-all": [*ingest, "--prune", str(empty)]}
            for name in args.steps:
                if name == "api-delete":
                    if server is not None:
                        with Prober(port, args.probe_s) as probe:
                            result[name] = api_deletes(port, args.sources, args.api_deletes, args.api_batch_deletes,
                                                       server.pid)
                        result[name]["serving"] = probe.summary()
                        print(json.dumps({name: _rounded(result[name])}), flush=True)
                    continue
                if server is None:
                    result[name] = step(name, commands[name], env)
                else:
                    with Prober(port, args.probe_s) as probe:
                        result[name] = step(name, commands[name], env, server.pid)
                    result[name]["serving"] = probe.summary()
                print(json.dumps({name: _rounded(result[name])}), flush=True)
        finally:
            if server is not None:
                server.send_signal(signal.SIGINT)
                server.wait(timeout=120)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print("commands: gateway ingest ... corpus.jsonl --json; gateway ingest ... --prune corpus-90.jsonl --json; "
              "gateway ingest ... --prune empty.jsonl --json" + ("  (beside `gateway serve`)" if args.served else ""))
    return 0


def _rounded(value):
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(value, 3 if value < 10 else 1) if isinstance(value, float) else value


if __name__ == "__main__":
    raise SystemExit(main())
