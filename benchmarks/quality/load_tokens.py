"""Fill the gateway's token-vector store from benchmarks/quality/precompute.py's tokens_<T>.npz.

That file holds what ingest would compute (same tokenizer, truncation and model), with [CLS] and
[SEP] kept; the gateway stores them without. This saves a second forward pass over the corpus
before `gateway eval --pipeline best`. Rows whose chunk is not the first of its source are left
out, and the reranker computes them on first use.

  LI_WORKDIR=... GATEWAY_TENANTS_DIR=docs/examples GATEWAY_MILVUS_URI=./data/scifact.db \
    python benchmarks/quality/load_tokens.py --tokens 512
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from gateway.runtime import build_runtime
from gateway.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    z = np.load(EXP / f"tokens_{args.tokens}.npz")
    offsets, vecs = z["offsets"], z["vecs"]
    index = {str(d): i for i, d in enumerate(z["ids"])}
    runtime = build_runtime(Settings())
    try:
        scope = runtime.registry.resolve("scifact", "scifact", namespace="beir").scope
        runtime.store.ensure(scope)
        rows = []
        for row in runtime.store._iterate(scope, scope.chunk_collection, "id", ["source_id", "chunk_id", "content_hash"]):
            i = index.get(row["source_id"])
            if i is None or row["chunk_id"] != "0":
                continue
            a, b = int(offsets[i]), int(offsets[i + 1])
            matrix = vecs[a + 1:b - 1] if b - a > 2 else vecs[a:b]
            rows.append((row["id"], row["source_id"], row["content_hash"], matrix))
        written = 0
        for start in range(0, len(rows), 500):
            written += runtime.tokens.put(scope, rows[start:start + 500], args.tokens)
        print(f"{written} token matrices written to {runtime.tokens.directory}")
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
