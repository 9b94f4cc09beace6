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


# (label, index.dense setting): FLAT is exact search, the reference; `hnsw` is what `auto` switches to.
CHOICES: list[tuple[str, dict]] = [
    ("flat", {"dense": "flat"}),
    ("hnsw (default)", {"dense": "hnsw"}),
    ("hnsw ef=16", {"dense": "hnsw", "ef": 16}),
    ("hnsw_sq", {"dense": "hnsw_sq"}),
    ("ivf_flat (default)", {"dense": "ivf_flat"}),
    ("ivf_flat nprobe=8", {"dense": "ivf_flat", "nprobe": 8}),
    ("ivf_flat nprobe=64", {"dense": "ivf_flat", "nprobe": 64}),
    ("ivf_sq8", {"dense": "ivf_sq8"}),
    ("ivf_sq8 nprobe=64", {"dense": "ivf_sq8", "nprobe": 64}),
]


def measure(scifact: Path, cache: Path, only: list[str] | None) -> dict[str, dict]:
    import asyncio

    from gateway.embedding.bundled import BundledEmbedder
    from gateway.retrieval.defaults import options_for
    from gateway.retrieval.evaluation import RANK_DEPTH, document_ranking, score
    from gateway.retrieval.options import Mode, Query
    from gateway.retrieval.retrievers import CollectionRetriever
    from gateway.storage.milvus import ChunkRecord, MilvusStore
    from gateway.storage.schema import Scope
    from gateway.tenancy.config import IndexConfig
    from gateway.tenancy.registry import CollectionRef

    chunks, asked = np.load(cache / "chunks.npz"), np.load(cache / "queries.npz")
    keys, vectors, texts = [str(k) for k in chunks["keys"]], chunks["vecs"], [str(t) for t in chunks["texts"]]
    query_ids, query_vectors = [str(q) for q in asked["ids"]], asked["vecs"]
    qrels = load_qrels(scifact / "qrels/test.tsv")
    query_texts = load_queries(scifact / "queries.jsonl")
    base = load_tenants(Path("docs/examples"))["scifact"].namespaces["beir"].collections["scifact"]
    records = [ChunkRecord(source_id=key.split("/")[0], chunk_id=key.split("/")[1], parent_key="", text=text,
                           title="", content_hash="h", created_at=1, updated_at=1, dense=vector, index_text=text)
               for key, text, vector in zip(keys, texts, vectors, strict=True)]
    # The embedder is never asked for a vector (every query brings its cached one); dense mode needs one.
    embedder = BundledEmbedder(threads=1)
    workdir = Path(tempfile.mkdtemp(prefix="index-recall-"))
    store = MilvusStore(str(workdir / "gateway.db"))
    report: dict[str, dict] = {}
    exact: dict[str, list[str]] = {}
    try:
        for label, setting in CHOICES:
            if only and label.split()[0] not in only and label != "flat":
                continue
            config = base.model_copy(update={"index": IndexConfig.model_validate(setting)})
            ref = CollectionRef(Scope("scifact", "beir", label.split()[0].replace("_", "-") + str(len(report))), config)
            # Rows go in under FLAT, then the index is built in one timed step, as `auto` does at its threshold.
            store.ensure(ref.scope, index=IndexConfig(dense="flat").policy())
            store.upsert_chunks(ref.scope, records)
            store.set_index_policy(ref.scope, config.index.policy())
            started = time.perf_counter()
            index = store.reconcile_index(ref.scope)
            build_s = time.perf_counter() - started
            index_bytes = sum(p.stat().st_size for p in workdir.rglob("*.idx")
                              if store.physical(ref.scope).chunks in str(p) and ".dense." in p.name)
            top10: dict[str, list[str]] = {}
            dense_ms = []
            for qid, vector in zip(query_ids, query_vectors, strict=True):
                started = time.perf_counter()
                rows = store.search_dense(ref.scope, vector, 10)
                dense_ms.append((time.perf_counter() - started) * 1000)
                top10[qid] = [f"{r.source_id}/{r.chunk_id}" for r in rows]
            if label == "flat":
                exact = top10
                # BM25 has one index on milvus-lite (TAAT_NAIVE; it refuses DAAT_* and drop ratios): its cost here.
                sparse_ms = []
                for qid in query_ids:
                    started = time.perf_counter()
                    store.search_sparse(ref.scope, query_texts[qid], 10)
                    sparse_ms.append((time.perf_counter() - started) * 1000)
                report["bm25 (SPARSE_INVERTED_INDEX, TAAT_NAIVE)"] = {"sparse p50 ms": round(statistics.median(sparse_ms), 2)}
            recall = statistics.mean(len(set(top10[q]) & set(exact[q])) / max(len(exact[q]), 1) for q in query_ids)
            retriever = CollectionRetriever(store, embedder, ref)
            quality = {}
            for mode in (Mode.DENSE, Mode.HYBRID):
                options = options_for(config, mode=mode, limit=RANK_DEPTH, group_by_source=config.group_by_source)

                async def run(options=options) -> dict[str, dict[str, float]]:
                    return {qid: document_ranking(await retriever.retrieve(Query(query_texts[qid], vector), options))
                            for qid, vector in zip(query_ids, query_vectors, strict=True)}

                quality[mode.value] = score(asyncio.run(run()), {q: qrels[q] for q in query_ids})["ndcg@10"]
            report[label] = {
                "index": index.describe() if index else None, "recall@10 vs flat": round(recall, 4),
                "dense nDCG@10": quality["dense"], "hybrid nDCG@10": quality["hybrid"],
                "build s": round(build_s, 2), "dense p50 ms": round(statistics.median(dense_ms), 2),
                "index bytes/row": round(index_bytes / len(records), 1)}
            print(json.dumps({label: report[label]}), flush=True)
            store.drop(ref.scope)
    finally:
        store.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["embed", "measure"])
    parser.add_argument("--scifact", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--only", help="comma-separated index types to measure besides flat (default: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.command == "embed":
        embed(args.scifact, args.cache)
        return
    report = measure(args.scifact, args.cache, args.only.split(",") if args.only else None)
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
