"""What an ingest job's progress windows cost: the same documents ingested with 32-document windows
(ingest jobs, gateway/jobs/runner.py) and 256-document windows (`gateway ingest`), interleaved.

Each run ingests into a fresh collection of one milvus-lite store, so neither pays for the other's
rows. Reports each run's seconds and the median ratio (32 / 256). Usage:

    python benchmarks/ingest_windows.py CORPUS.jsonl [--documents 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

from gateway.embedding.base import CachedEmbedder
from gateway.embedding.factory import build_embedder
from gateway.ingest.loaders import load_paths
from gateway.ingest.sync import WINDOW, ingest_documents
from gateway.jobs.runner import JOB_WINDOW
from gateway.settings import Settings
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope
from gateway.tenancy.config import CollectionConfig, TrustTier
from gateway.tenancy.registry import CollectionRef


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="BEIR corpus.jsonl (or a folder of documents)")
    parser.add_argument("--documents", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    documents = list(islice(load_paths([args.corpus]), args.documents))
    embedder: CachedEmbedder = build_embedder(Settings())
    with tempfile.TemporaryDirectory() as directory:
        store = MilvusStore(str(Path(directory) / "bench.db"), dim=embedder.dim)
        seconds: dict[int, list[float]] = {JOB_WINDOW: [], WINDOW: []}
        try:
            for repeat in range(args.repeats):
                for window in (JOB_WINDOW, WINDOW) if repeat % 2 == 0 else (WINDOW, JOB_WINDOW):
                    ref = CollectionRef(Scope("bench", "bench", f"w{window}_{repeat}"),
                                        CollectionConfig(trust_tier=TrustTier.THIRD_PARTY))
                    started = time.perf_counter()
                    ingest_documents(store, embedder, ref, documents, progress=False, window=window)
                    seconds[window].append(time.perf_counter() - started)
                    print(f"repeat {repeat} window {window}: {seconds[window][-1]:.2f} s", file=sys.stderr)
        finally:
            store.close()
    ratios = [a / b for a, b in zip(seconds[JOB_WINDOW], seconds[WINDOW])]
    print(f"documents={len(documents)} window {JOB_WINDOW}: median {statistics.median(seconds[JOB_WINDOW]):.2f} s; "
          f"window {WINDOW}: median {statistics.median(seconds[WINDOW]):.2f} s; "
          f"ratio {JOB_WINDOW}/{WINDOW}: median {statistics.median(ratios):.3f} (runs {', '.join(f'{r:.3f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
