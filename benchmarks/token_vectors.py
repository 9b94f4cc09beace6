"""Token vectors in Milvus (companion collection, base64 float16 pieces) vs the former SQLite file.

Writes --chunks matrices of --tokens x 384 float16 (random, SciFact-like: 238 tokens a chunk on
average) into a fresh milvus-lite store through `TokenVectorStore`, and the same into one SQLite
file laid out as the gateway kept them before (one row per chunk, the matrix as a BLOB). Then
reads what one rerank reads, --top random chunks, --reps times from each, interleaved; and
reports write time, p50/p95 read time and bytes on disk. The Milvus reads go to the store every time
(the in-process cache off); `kept` is the same read again with the cache on (64 MiB, the default),
which is what a rerank of hits read before pays. Bounded by --chunks and --reps.

    nice -n 5 .venv/bin/python benchmarks/token_vectors.py --chunks 2000 --top 20 --reps 50
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope
from gateway.storage.token_vectors import TokenVectorStore

SCOPE = Scope("bench", "beir", "scifact")


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=238)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="token-vectors-"))
    rows = [(f"beir/d{i}/0", f"d{i}", f"h{i}", rng.standard_normal((args.tokens, 384)).astype(np.float16))
            for i in range(args.chunks)]

    store = MilvusStore(str(work / "g.db"))
    milvus = TokenVectorStore(store, cache_bytes=0)
    kept = TokenVectorStore(store)
    started = time.perf_counter()
    for start in range(0, len(rows), 100):
        milvus.put(SCOPE, rows[start:start + 100], 512)
    milvus_write = time.perf_counter() - started

    db = sqlite3.connect(work / "tokens.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE tokens (row_id TEXT PRIMARY KEY, source_id TEXT, content_hash TEXT, "
               "max_tokens INTEGER, n INTEGER, dim INTEGER, data BLOB)")
    started = time.perf_counter()
    for start in range(0, len(rows), 100):
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?)",
                       [(r, s, h, 512, m.shape[0], m.shape[1], m.tobytes()) for r, s, h, m in rows[start:start + 100]])
        db.execute("COMMIT")
    sqlite_write = time.perf_counter() - started

    def sqlite_get(wanted: list[tuple[str, str]]) -> dict[str, np.ndarray]:
        hashes = dict(wanted)
        found = db.execute(f"SELECT row_id, content_hash, n, dim, data FROM tokens WHERE max_tokens = 512 AND "
                           f"row_id IN ({','.join('?' * len(wanted))})", [r for r, _ in wanted]).fetchall()
        return {r: np.frombuffer(d, dtype=np.float16).reshape(n, dim) for r, h, n, dim, d in found if hashes[r] == h}

    times: dict[str, list[float]] = {"milvus": [], "sqlite": [], "kept": []}
    pick = random.Random(1)
    for _ in range(args.reps):
        wanted = [(r, h) for r, _, h, _ in pick.sample(rows, args.top)]
        kept.get(SCOPE, wanted, 512)  # read once: kept
        for name, get in (("milvus", lambda w: milvus.get(SCOPE, w, 512)), ("sqlite", sqlite_get),
                          ("kept", lambda w: kept.get(SCOPE, w, 512))):
            t = time.perf_counter()
            got = get(wanted)
            times[name].append((time.perf_counter() - t) * 1000)
            assert len(got) == args.top
    store.close()
    db.close()

    def stats(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {"p50_ms": round(statistics.median(ordered), 2), "p95_ms": round(ordered[int(0.95 * len(ordered))], 2)}

    report = {"chunks": args.chunks, "tokens": args.tokens, "top": args.top, "reps": args.reps,
              "milvus": {"write_s": round(milvus_write, 2), **stats(times["milvus"]),
                         "disk_mb": round(_size(work / "g.db") / 1e6, 1)},
              "sqlite": {"write_s": round(sqlite_write, 2), **stats(times["sqlite"]),
                         "disk_mb": round(_size(work / "tokens.sqlite") / 1e6, 1)},
              "kept": stats(times["kept"])}
    print(json.dumps(report, indent=2))
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
