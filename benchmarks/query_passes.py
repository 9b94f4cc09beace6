"""What a query's embedding costs alone and in a pass shared with others (gateway/embedding/batching.py).

Embeds the first `--count` SciFact queries on the bundled model's query session (one thread), in
passes of 1, 2, 4 and 8 queries in arrival order, and reports CPU ms per query for each size
(`--rounds` rounds, interleaved), and checks that a shared pass gives each query the vector it
gets alone.

    python benchmarks/query_passes.py --queries $SCIFACT/queries.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from gateway.embedding.bundled import BundledEmbedder, _mean_pool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--count", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1,2,4,8")
    args = parser.parse_args()
    with args.queries.open() as handle:
        texts = [json.loads(line)["text"] for line in handle if line.strip()][:args.count]
    embedder = BundledEmbedder()
    ids = [embedder._tokenizer.encode(text).ids for text in texts]
    lengths = sorted(len(i) for i in ids)
    print(f"{len(texts)} queries, tokens p50 {lengths[len(lengths) // 2]}, max {lengths[-1]}")
    sizes = [int(size) for size in args.sizes.split(",")]
    cpu: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            start = time.process_time()
            for first in range(0, len(ids), size):
                embedder._query_pass(ids[first:first + size])
            cpu[size].append(1000 * (time.process_time() - start) / len(ids))
    alone = np.stack([embedder.embed_query(text) for text in texts[:8]])
    shared = np.stack([_mean_pool(h[None], np.ones((1, h.shape[0]), dtype=np.int64))[0]
                       for h in embedder._query_pass(ids[:8])])
    print("| queries a pass | CPU ms a query (median of rounds) | rounds |")
    print("| --- | --- | --- |")
    for size in sizes:
        print(f"| {size} | {statistics.median(cpu[size]):.2f} | {', '.join(f'{v:.2f}' for v in cpu[size])} |")
    print(f"largest difference between a query's vector alone and in a pass of 8: {float(np.abs(alone - shared).max()):.2e}")


if __name__ == "__main__":
    main()
