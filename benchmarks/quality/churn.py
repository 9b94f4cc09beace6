"""Simulate a re-chunked collection for the BM25 drift figure (issue 11, item 6).

Writes, for every source of one collection, its text cut into 1,000-character children as extra
rows, then deletes them again: what a collection holds after it was re-chunked, or after
documents were replaced. The live rows are unchanged; only the engine's BM25 statistics have
seen the deleted rows. Dense vectors of the extra rows are copies of their source's (dense search
is not what this measures).

  GATEWAY_TENANTS_DIR=... GATEWAY_MILVUS_URI=... python benchmarks/quality/churn.py \
    --tenant scifact --namespace beir --collection scifact [--rounds 1]
"""

from __future__ import annotations

import argparse
import time

from gateway.ingest.chunker import chunk_text
from gateway.runtime import build_runtime
from gateway.settings import Settings
from gateway.tenancy.config import ChunkingConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--collection", required=True)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    runtime = build_runtime(Settings())
    try:
        store = runtime.store
        scope = runtime.registry.resolve(args.tenant, args.collection, namespace=args.namespace).scope
        store.ensure(scope)
        fields = ["tenant", "namespace", "source_id", "chunk_id", "parent_key", "text", "bm25_text", "dense",
                  "title", "source_url", "source_path", "content_hash", "created_at", "updated_at", "metadata"]
        live = list(store._iterate(scope, scope.chunk_collection, "id", fields))
        chunking = ChunkingConfig(child_chars=1000, child_overlap=150, parent_chars=8000)
        started = time.perf_counter()
        written = 0
        for _ in range(args.rounds):
            extra = []
            for row in live:
                for child in chunk_text(row["text"], chunking).children:
                    text = f"{row['title']}\n{child.text}" if row["title"] else child.text
                    extra.append({**row, "id": f"{row['id']}~churn{child.chunk_id}", "chunk_id": f"churn{child.chunk_id}",
                                  "text": child.text, "bm25_text": store.analyzer.analyse(text),
                                  "dense": [float(x) for x in row["dense"]]})
            for start in range(0, len(extra), 500):
                store._client.insert(scope.chunk_collection, extra[start:start + 500])
            store._client.flush(scope.chunk_collection)
            store.delete_chunks(scope, [r["id"] for r in extra])
            written += len(extra)
        print(f"{len(live)} live rows; {written} rows written and deleted in {time.perf_counter() - started:.1f} s; "
              f"count now {store.count(scope)}")
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
