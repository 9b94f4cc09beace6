"""Dense index choices on real embeddings: recall@10 against exact (FLAT) search, nDCG@10, build and
search cost, through MilvusStore on milvus-lite (docs/benchmarks.md, "Dense indexes").

  python benchmarks/index_recall.py embed --scifact $SCIFACT --cache /tmp/scifact-vectors
  python benchmarks/index_recall.py measure --scifact $SCIFACT --cache /tmp/scifact-vectors --json

`embed` runs the bundled embedder over SciFact as `gateway ingest` does with
docs/examples/scifact-tenant.yaml (one chunk per abstract, title and text) and over the test
queries, and caches the vectors (the embedder does ~25 abstracts/s on two idle cores). `measure`
loads the cached vectors into one collection per index choice and compares each with FLAT.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from gateway.ingest.chunker import chunk_text
from gateway.ingest.loaders import load_jsonl
from gateway.retrieval.evaluation import load_qrels, load_queries
from gateway.tenancy.loader import load_tenants


def embed(scifact: Path, cache: Path) -> None:
    from gateway.embedding.bundled import BundledEmbedder

    chunking = load_tenants(Path("docs/examples"))["scifact"].namespaces["beir"].collections["scifact"].chunking
    keys, texts, titles = [], [], []
    for doc in load_jsonl(scifact / "corpus.jsonl"):
        for child in chunk_text(doc.text, chunking).children:
            keys.append(f"{doc.source_id}/{child.chunk_id}")
            texts.append(f"{doc.title}\n{child.text}" if doc.title else child.text)
            titles.append(doc.title)
    qrels = load_qrels(scifact / "qrels/test.tsv")
    queries = {qid: text for qid, text in load_queries(scifact / "queries.jsonl").items() if qid in qrels}
    embedder = BundledEmbedder(threads=2)
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    query_ids = sorted(queries)
    query_vectors = np.stack([embedder.embed_query(queries[q]) for q in query_ids]).astype(np.float32)
    np.savez(cache / "queries.npz", ids=np.array(query_ids), vecs=query_vectors)
    parts = []
    for start in range(0, len(texts), 256):
        parts.append(np.asarray(embedder.embed_documents(texts[start:start + 256]), dtype=np.float32))
        print(f"{start + len(parts[-1])}/{len(texts)} chunks, {time.perf_counter() - started:.0f} s", flush=True)
    np.savez(cache / "chunks.npz", keys=np.array(keys), vecs=np.concatenate(parts), texts=np.array(texts))
    print(f"{len(texts)} chunks and {len(query_ids)} queries in {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["embed", "measure"])
    parser.add_argument("--scifact", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.command == "embed":
        embed(args.scifact, args.cache)


if __name__ == "__main__":
    main()
