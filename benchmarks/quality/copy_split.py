"""Build the 4-collection SciFact split from an ingested single collection, without embedding again.

`gateway ingest` of each part (docs/benchmarks.md, "Federated search") writes the same rows, since
the embedder is deterministic; this copies them (dense vectors, analysed text, parents) from the
single collection into the parts named by benchmarks/split_corpus.py's files, in seconds instead of
an ingest's minutes of CPU.

  GATEWAY_TENANTS_DIR=docs/examples python benchmarks/quality/copy_split.py \
    --single-uri ./data/scifact.db --split-uri ./data/scifact-split.db --parts data/scifact-split
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gateway.settings import Settings
from gateway.storage.milvus import MilvusStore
from gateway.tenancy.loader import load_tenants
from gateway.tenancy.registry import TenantRegistry

FIELDS = ["tenant", "namespace", "source_id", "chunk_id", "parent_key", "text", "bm25_text", "dense",
          "title", "source_url", "source_path", "content_hash", "created_at", "updated_at", "metadata"]
PARENT_FIELDS = ["tenant", "namespace", "source_id", "title", "text", "content_hash", "metadata", "placeholder"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single-uri", required=True)
    parser.add_argument("--split-uri", required=True)
    parser.add_argument("--parts", required=True, type=Path)
    args = parser.parse_args()
    registry = TenantRegistry(load_tenants(Settings().tenants_dir))
    single, split = MilvusStore(args.single_uri), MilvusStore(args.split_uri)
    source = registry.resolve("scifact", "scifact", namespace="beir").scope
    single.ensure(source)
    chunks = list(single._iterate(source, source.chunk_collection, "id", FIELDS))
    parents = {r["key"]: r for r in single._iterate(source, source.parent_collection, "key", PARENT_FIELDS)}
    for path in sorted(args.parts.glob("part-*.jsonl")):
        ids = {json.loads(line)["_id"] for line in path.read_text().splitlines() if line.strip()}
        scope = registry.resolve("scifact-split", path.stem, namespace="beir").scope
        split.drop(scope)
        split.ensure(scope)
        rows = [{**r, "tenant": scope.tenant, "dense": [float(x) for x in r["dense"]]}
                for r in chunks if r["source_id"] in ids]
        kept = [{**p, "tenant": scope.tenant, "placeholder": [0.0, 0.0]} for p in parents.values()
                if p["source_id"] in ids]
        for start in range(0, len(rows), 500):
            split._client.insert(scope.chunk_collection, rows[start:start + 500])
        for start in range(0, len(kept), 500):
            split._client.insert(scope.parent_collection, kept[start:start + 500])
        split._client.flush(scope.chunk_collection)
        split._client.flush(scope.parent_collection)
        print(f"{path.stem}: {len(ids)} sources, {split.count(scope)} chunks, {len(kept)} parents")
    single.close()
    split.close()


if __name__ == "__main__":
    main()
