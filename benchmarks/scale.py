"""The curve: load, size and search latency of the embedded store at 10k, 100k, 1M chunks.

A real corpus replicated: SciFact's 5,183 abstracts embedded once with the bundled model (cached in
`--cache`), then chunk i is a replica of abstract i mod 5,183: its vector is the abstract's plus
Gaussian noise (sigma `--noise` per dimension, renormalised), so every chunk is distinct and the
nearest neighbours of a query are realistic clusters; its text is 60 words drawn from the
abstract's own words, so BM25 sees the corpus's vocabulary and term statistics. Queries are
SciFact's test questions, their vectors from the same model.

Per size, into a fresh milvus-lite store: the bulk load (`ingest_documents`, as `gateway ingest`
of a JSONL of vectors runs it, without the JSON parsing) with wall and CPU seconds; the process's
RSS and the store's size on disk; dense, BM25 and hybrid (RRF) p50/p95 through the gateway's
CollectionRetriever at concurrency 1 and 8; dense recall@10 against exact search (numpy, brute
force over the same vectors; also with ann-benchmarks' epsilon 0.01, which counts near-ties). Usage:

    python benchmarks/scale.py --sizes 10000 100000 [--queries 30] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import percentile  # noqa: E402

TENANT = """
id: scale
namespaces:
  bench:
    collections:
      corpus: {trust_tier: third-party, mode: hybrid}
"""
WORDS_PER_CHUNK = 60
BLOCK = 10_000
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9-]+")


def corpus_vectors(scifact: Path, cache: Path) -> tuple[list[dict], np.ndarray, list[dict], np.ndarray]:
    """SciFact's documents and test queries with their bundled-model vectors (computed once, cached)."""
    docs = [json.loads(line) for line in (scifact / "corpus.jsonl").open()]
    tests = {line.split("\t")[0] for line in (scifact / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    queries = [q for q in map(json.loads, (scifact / "queries.jsonl").open()) if q["_id"] in tests]
    cache.mkdir(parents=True, exist_ok=True)
    doc_file, query_file = cache / "scifact_corpus.npy", cache / "scifact_queries.npy"
    if not doc_file.exists() or not query_file.exists():
        from gateway.embedding.bundled import BundledEmbedder

        embedder = BundledEmbedder(batch_size=16)
        np.save(query_file, np.stack([embedder.embed_query(q["text"]) for q in queries]).astype(np.float32))
        texts = [(d.get("title", "") + "\n" + d["text"])[:1500] for d in docs]
        np.save(doc_file, np.concatenate([embedder.embed_documents(texts[i:i + 256])
                                          for i in range(0, len(texts), 256)]).astype(np.float32))
    base = np.load(doc_file)
    # A cache of the first abstracts only (embedding all 5,183 takes minutes on a busy machine) is used as it is.
    return docs[:len(base)], base, queries, np.load(query_file)


class Replicas:
    """Chunk i of the synthetic corpus, reproducibly: text and vector from abstract i mod len(base)."""

    def __init__(self, docs: list[dict], base: np.ndarray, noise: float, seed: int = 11) -> None:
        self._words = [_WORD.findall(f"{d.get('title', '')} {d['text']}") or ["empty"] for d in docs]
        self._base = base
        self._noise = noise
        self._seed = seed

    def vectors(self, start: int, stop: int) -> np.ndarray:
        return np.concatenate([self._vector_block(b)[max(start - b, 0):stop - b] for b in _blocks(start, stop)])

    def vectors_of(self, chunks: list[int]) -> np.ndarray:
        """The vectors of the chunks numbered `chunks`, in that order, each block drawn once."""
        numbers = np.asarray(chunks, dtype=np.int64)
        out = np.empty((len(numbers), self._base.shape[1]), dtype=np.float32)
        firsts = numbers - numbers % BLOCK
        for first in np.unique(firsts):
            mine = firsts == first
            out[mine] = self._vector_block(int(first))[numbers[mine] - first]
        return out

    def _vector_block(self, first: int) -> np.ndarray:
        """Chunks first .. first + BLOCK: the noise is drawn per aligned block, so chunk i's vector is
        the same whichever range asks for it (the load and the exact search read different ranges)."""
        rng = np.random.default_rng([self._seed, first])
        rows = self._base[np.arange(first, first + BLOCK) % len(self._base)]
        noisy = rows + rng.standard_normal(rows.shape).astype(np.float32) * self._noise
        return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)

    def texts(self, start: int, stop: int) -> list[str]:
        out = []
        for b in _blocks(start, stop):
            rng = np.random.default_rng([self._seed + 1, b])
            picks = rng.integers(0, 1 << 30, (BLOCK, WORDS_PER_CHUNK))
            for i in range(max(start, b), min(stop, b + BLOCK)):
                words = self._words[i % len(self._words)]
                out.append(" ".join(words[j % len(words)] for j in picks[i - b]) + ".")
        return out


def _blocks(start: int, stop: int) -> range:
    return range(start - start % BLOCK, stop, BLOCK)


def documents(replicas: Replicas, total: int, per_doc: int, block: int = 10_000,
              deadline: float = float("inf")) -> Iterator:
    """The corpus's first `total` chunks as documents; fewer (whole blocks) once `deadline`
    (time.perf_counter) has passed."""
    from gateway.ingest.loaders import Document
    from gateway.ingest.vectors import VectorChunk

    for start in range(0, total, block):
        if time.perf_counter() > deadline:
            return
        stop = min(total, start + block)
        vectors, texts = replicas.vectors(start, stop), replicas.texts(start, stop)
        for first in range(start, stop, per_doc):
            last = min(stop, first + per_doc)
            yield Document(f"doc-{first // per_doc}", "", title=f"Replica {first // per_doc}",
                           chunks=tuple(VectorChunk(texts[i - start], vectors[i - start]) for i in range(first, last)))


def exact_top(replicas: Replicas, total: int, queries: np.ndarray, k: int = 10, block: int = 50_000) -> list[list[int]]:
    """Exact cosine top-k chunk numbers per query, by brute force over the same vectors, block by block."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_ids = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, total, block):
        stop = min(total, start + block)
        scores = queries @ replicas.vectors(start, stop).T
        scores = np.concatenate([best_scores, scores], axis=1)
        ids = np.concatenate([best_ids, np.broadcast_to(np.arange(start, stop), (len(queries), stop - start))], axis=1)
        top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
        best_scores = np.take_along_axis(scores, top, axis=1)
        best_ids = np.take_along_axis(ids, top, axis=1)
    order = np.argsort(-best_scores, axis=1)
    return np.take_along_axis(best_ids, order, axis=1).tolist()


def recall_at_10(replicas: Replicas, total: int, queries: np.ndarray, found: list[list[int]],
                 epsilon: float = 0.01) -> tuple[float, float]:
    """Dense recall@10 against exact search: strict (the exact top 10's chunks found), and with
    ann-benchmarks' epsilon (a found chunk counts when its cosine distance is at most (1 + epsilon)
    times the exact 10th's). A replicated corpus has near-ties (copies of one abstract whose scores
    differ by less than 0.001), which the strict figure counts as misses."""
    strict, loose = recalls(replicas, queries, exact_top(replicas, total, queries), found, epsilon)
    return float(np.mean(strict)), float(np.mean(loose))


def recalls(replicas: Replicas, queries: np.ndarray, exact: list[list[int]], found: list[list[int]],
            epsilon: float = 0.01) -> tuple[list[float], list[float]]:
    """recall_at_10's two figures per query, given each query's exact top 10 (`exact_top`)."""
    numbers = sorted({c for chunks in (*found, *exact) for c in chunks})
    vectors = dict(zip(numbers, replicas.vectors_of(numbers)))

    def distances(query: np.ndarray, chunks: list[int]) -> np.ndarray:
        return 1.0 - np.array([float(vectors[c] @ query) for c in chunks])

    strict, loose = [], []
    for query, hits, best in zip(queries, found, exact):
        tenth = distances(query, best[-1:])[0]
        strict.append(len(set(hits) & set(best)) / 10)
        loose.append(min(10, int(np.sum(distances(query, hits) <= (1 + epsilon) * tenth))) / 10)
    return strict, loose


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def disk_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1024


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class EngineLog(logging.Handler):
    """milvus-lite's background work as it logs it (compactions, index builds per segment) and the
    gateway's index switch: each line echoed to stderr with the seconds since `start`, and the
    seconds each kind took summed."""

    _DONE = re.compile(r"compaction: .* done in ([0-9.]+)s")
    _BUILT = re.compile(r"bg: built (\d+) segment indexes in ([0-9.]+)s")
    _SWITCH = re.compile(r"index is now .* \(([0-9.]+) s\)")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.start = time.perf_counter()
        self.compaction_s = self.index_build_s = 0.0
        self.compactions = self.segment_indexes = 0
        self.switch_s = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if done := self._DONE.search(message):
            self.compaction_s += float(done.group(1))
            self.compactions += 1
        elif built := self._BUILT.search(message):
            self.segment_indexes += int(built.group(1))
            self.index_build_s += float(built.group(2))
        elif switched := self._SWITCH.search(message):
            self.switch_s += float(switched.group(1))
        else:
            return
        print(f"  [{time.perf_counter() - self.start:6.0f} s] {message}", file=sys.stderr, flush=True)

    def attach(self) -> EngineLog:
        for name in ("milvus_lite", "gateway.storage.milvus.indexing"):
            logging.getLogger(name).setLevel(logging.INFO)
            logging.getLogger(name).addHandler(self)
        return self

    def totals(self) -> dict:
        return {"compactions": self.compactions, "compaction_s": self.compaction_s,
                "segment_indexes_built": self.segment_indexes, "index_build_s": self.index_build_s,
                "index_switch_s": self.switch_s}


def engine_thread_cpu_s() -> float:
    """CPU seconds of milvus-lite's background threads (compaction and the index builds they start;
    FAISS's own worker threads are not Python threads and count elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for thread in threading.enumerate():
        if thread.name.startswith("milvus_lite-") and thread.native_id is not None:
            try:
                fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def wait_for_engine(store_dir: Path, name: str) -> None:
    """Until milvus-lite's background compactions and index builds queued so far are done."""
    from gateway.storage.bulk import engine_collection

    collection = engine_collection(store_dir, name)
    if collection is not None:
        collection._wait_for_bg()


def timed_searches(retriever, options, queries: list, concurrency: int) -> tuple[list[float], list]:
    from gateway.retrieval.options import Query

    def one(item):
        text, vector = item
        started = time.perf_counter()
        hits = asyncio.run(retriever.retrieve(Query(text, vector=vector), options))
        return time.perf_counter() - started, hits

    with ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(one, queries))
    return [d[0] * 1000 for d in done], [d[1] for d in done]


def run_size(size: int, args, docs, base, queries, query_vectors, folder: Path) -> dict:
    from gateway.ingest.sync import ingest_documents
    from gateway.retrieval.options import Mode, SearchOptions
    from gateway.retrieval.retrievers import CollectionRetriever
    from gateway.runtime import build_runtime
    from gateway.settings import Settings

    store_dir = folder / f"scale-{size}.db"
    shutil.rmtree(store_dir, ignore_errors=True)
    (folder / "tenants").mkdir(exist_ok=True)
    (folder / "tenants" / "scale.yaml").write_text(TENANT, encoding="utf-8")
    settings = Settings(tenants_dir=folder / "tenants", milvus_uri=str(store_dir))
    replicas = Replicas(docs, base, args.noise)
    runtime = build_runtime(settings)
    result: dict = {"chunks": size}
    engine_log = EngineLog().attach()
    try:
        ref = runtime.registry.resolve("scale", "corpus", namespace="bench")
        rss_before = rss_mb()
        cpu0, wall0 = cpu_s(), time.perf_counter()
        last = [wall0]

        def progress(report) -> None:
            now = time.perf_counter()
            if now - last[0] > 15:
                print(f"  {report.chunks:,} chunks, {now - wall0:.0f} s, CPU {cpu_s() - cpu0:.0f} s "
                      f"(engine background {engine_thread_cpu_s():.0f} s), RSS {rss_mb():,.0f} MB",
                      file=sys.stderr, flush=True)
                last[0] = now

        deadline = wall0 + args.load_budget_s if args.load_budget_s else float("inf")
        report = ingest_documents(runtime.store, runtime.embedder, ref,
                                  documents(replicas, size, args.per_doc, deadline=deadline), progress=False,
                                  on_window=progress)
        if report.chunks_written < size:
            print(f"  load budget ({args.load_budget_s:.0f} s) spent at {report.chunks_written:,} chunks: "
                  f"measuring those", file=sys.stderr, flush=True)
            size = result["chunks"] = report.chunks_written
        result["load_s"] = time.perf_counter() - wall0
        result["load_cpu_s"] = cpu_s() - cpu0
        result["written"] = report.chunks_written
        result["rss_load_mb"] = rss_mb()
        # What the engine still had queued when the writes returned (compactions, index builds).
        started, cpu = time.perf_counter(), cpu_s()
        wait_for_engine(store_dir, runtime.store.physical(ref.scope).chunks)
        result["engine_tail_s"] = time.perf_counter() - started
        result["engine_tail_cpu_s"] = cpu_s() - cpu
        result["engine_bg_cpu_s"] = engine_thread_cpu_s()
        result.update(engine_log.totals())
        result["rss_mb"] = rss_mb()
        result["rss_before_mb"] = rss_before
        result["disk_mb"] = disk_mb(store_dir)
        assert runtime.embedder.inner.loaded is False, "the bulk load of vectors loaded the model"

        retriever = CollectionRetriever(runtime.store, runtime.embedder, ref)
        picked = list(range(min(args.queries, len(queries))))
        items = [(queries[i]["text"], query_vectors[i]) for i in picked]
        # The first search after a load pays for the engine's loading of new segments: reported apart.
        started = time.perf_counter()
        asyncio.run(retriever.retrieve(_query(items[0]), SearchOptions(Mode.HYBRID, 10)))
        result["first_hybrid_ms"] = (time.perf_counter() - started) * 1000
        for mode in (Mode.DENSE, Mode.SPARSE, Mode.HYBRID):
            options = SearchOptions(mode, 10, fields=frozenset({"text", "title"}))
            for concurrency in args.concurrency:
                work = items if concurrency == 1 else items * 2
                wall, cpu = time.perf_counter(), cpu_s()
                latencies, hits = timed_searches(retriever, options, work, concurrency)
                wall, cpu = time.perf_counter() - wall, cpu_s() - cpu
                # CPU per query (this process holds the engine): what the machine's load does not change.
                result[f"{mode.value}_c{concurrency}"] = {
                    "p50_ms": percentile(latencies, 0.5), "p95_ms": percentile(latencies, 0.95),
                    "qps": len(work) / wall, "cpu_ms_per_query": cpu * 1000 / len(work)}
                if mode is Mode.DENSE and concurrency == args.concurrency[0]:
                    found = [[_chunk_number(h, args.per_doc) for h in query_hits] for query_hits in hits]
                    result["dense_recall_at_10"], result["dense_recall_at_10_eps"] = recall_at_10(
                        replicas, size, query_vectors[picked], found)
            print(f"  {mode.value}: " + " / ".join(f"c{c} {result[f'{mode.value}_c{c}']}" for c in args.concurrency),
                  file=sys.stderr, flush=True)
        result["rss_after_search_mb"] = rss_mb()
        if args.maintenance:
            wall0 = time.perf_counter()
            again = ingest_documents(runtime.store, runtime.embedder, ref, documents(replicas, size, args.per_doc), progress=False)
            result["resync_unchanged_s"] = time.perf_counter() - wall0
            assert again.chunks_unchanged == size, again.summary()
    finally:
        for name in ("milvus_lite", "gateway.storage.milvus.indexing"):
            logging.getLogger(name).removeHandler(engine_log)
        runtime.close()
        release(store_dir)
    try:
        if args.maintenance:
            result.update(maintenance(settings, store_dir, folder, size))
    finally:
        if not args.keep:
            shutil.rmtree(store_dir, ignore_errors=True)
    return result


def release(store_dir: Path) -> None:
    """Stop this process's embedded milvus-lite engine for the store, so other processes may open it."""
    from milvus_lite.server_manager import server_manager_instance
    from gateway.storage.record import StorePaths

    server_manager_instance.release_server(str(StorePaths.of(str(store_dir)).store))


def maintenance(settings, store_dir: Path, folder: Path, size: int) -> dict:
    """`gateway verify`, `backup` and `compact` as an operator runs them (a process each, start-up
    included), then the deletion of every source (what `ingest --prune` and deleteSource batch do)."""
    from gateway.ingest.sync import remove_sources
    from gateway.runtime import build_runtime

    env = {**os.environ, "GATEWAY_TENANTS_DIR": str(settings.tenants_dir), "GATEWAY_MILVUS_URI": str(store_dir),
           "PYTHONPATH": str(ROOT)}
    out: dict = {}
    backup_dir = folder / f"backup-{size}"
    shutil.rmtree(backup_dir, ignore_errors=True)
    for name, command in (("verify", ["verify", "--json"]), ("backup", ["backup", str(backup_dir)]),
                          ("compact", ["compact", "--tenant", "scale", "--json"])):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "gateway.cli", *command], env=env, capture_output=True, text=True)
        out[f"{name}_s"] = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"gateway {name} failed ({done.returncode}): {done.stderr[-2000:]}")
        print(f"  {name}: {out[f'{name}_s']:.1f} s", file=sys.stderr, flush=True)
    out["backup_mb"] = disk_mb(backup_dir)
    shutil.rmtree(backup_dir, ignore_errors=True)
    runtime = build_runtime(settings)
    try:
        ref = runtime.registry.resolve("scale", "corpus", namespace="bench")
        sources = sorted({row.source_id for row in runtime.store.inventory(ref.scope).values()})
        started = time.perf_counter()
        removed = remove_sources(runtime.store, runtime.tokens, ref.scope, sources)
        out["delete_all_sources_s"] = time.perf_counter() - started
        out["sources_deleted"] = len(sources)
        assert removed.chunks == size and runtime.store.count(ref.scope) == 0, removed
    finally:
        runtime.close()
    return out


def _rounded(value):
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(value, 3 if value < 10 else 1) if isinstance(value, float) else value


def _query(item):
    from gateway.retrieval.options import Query

    return Query(item[0], vector=item[1])


def _chunk_number(hit, per_doc: int) -> int:
    return int(hit.source_id.removeprefix("doc-")) * per_doc + int(hit.chunk_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=30, help="SciFact test queries timed per mode")
    parser.add_argument("--noise", type=float, default=0.02, help="per-dimension sigma added to each replica")
    parser.add_argument("--scifact", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "gateway-scale-cache")
    parser.add_argument("--keep", type=Path, help="write the stores here and keep them")
    parser.add_argument("--per-doc", type=int, default=5, help="chunks per source document")
    parser.add_argument("--load-budget-s", type=float,
                        help="stop loading at the first block boundary after this many seconds and measure the chunks loaded")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8],
                        help="concurrencies timed per mode (c1 times each query once, others twice)")
    parser.add_argument("--maintenance", action="store_true",
                        help="then time a re-sync, `gateway verify`, `backup`, `compact` and deleting every source")
    args = parser.parse_args()
    docs, base, queries, query_vectors = corpus_vectors(args.scifact, args.cache)
    print(f"base: {len(base)} SciFact abstracts, {len(queries)} test queries (bundled model vectors)")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for size in args.sizes:
            result = run_size(size, args, docs, base, queries, query_vectors, folder)
            print(json.dumps(_rounded(result)), flush=True)
            print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
