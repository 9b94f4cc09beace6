"""What a fused search's stored fields cost: fetched for every candidate, or for the returned rows only.

A hybrid search ranks 50 candidates a signal and returns 10. This measures, on the throughput
benchmark's store (run `throughput.py` once first to build it) served by milvus-lite's server
as a child process, the CPU per query of this process and of the server for:

  every-field   both searches fetch every stored field (what the throughput floor does)
  identities    both searches fetch a hit's identity fields (id, tenant, namespace, source and chunk id)
  keys          both searches fetch the primary key only (the lower bound: what the gateway now
                asks for when a search needs identities only; the rest of an identity is in the key)
  keys+modality both searches fetch the primary key and the modality column (what the gateway asked
                for on a collection with that column until 2026-11-27)
  store         both searches for identities through the gateway's store (`MilvusStore`): the key
                only, sent by milvus-lite's lean call (storage/milvus/client.py)
  fill          keys, then the 10 returned rows' fields by primary key (`MilvusStore.fill`)
  fill+boundary the same lookup with the tenant/namespace boundary clause in its expression

Query vectors and BM25 terms are computed before timing; the variants are interleaved in blocks
of 20 queries, the order rotating, so a noisy machine affects them alike.

    python benchmarks/fill_cost.py --queries $SCIFACT/queries.jsonl --work /tmp/throughput
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402
from common import tree_cpu_seconds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gateway-throughput"))
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    if not (args.work / "store").exists():
        raise SystemExit(f"no store under {args.work}: run benchmarks/throughput.py with --work {args.work} first")

    import numpy as np
    from pymilvus import MilvusClient

    from gateway.embedding.bundled import BundledEmbedder
    from gateway.storage.analyzer import Analyzer
    from gateway.storage.filters import literal
    from gateway.storage.milvus import MilvusStore
    from gateway.storage.record import StorePaths
    from gateway.storage.schema import CHUNK_OUTPUT_FIELDS, Scope
    from gateway.storage.server import SupervisedServer

    identities = ["id", "tenant", "namespace", "source_id", "chunk_id"]
    scope = Scope("bench", "bench", "corpus")
    with SupervisedServer(StorePaths(args.work / "store" / "gateway.db")) as server:
        client = MilvusClient(server.uri, token=server.token)
        collection = scope.chunk_collection
        client.load_collection(collection)
        boundary = MilvusStore._boundary(scope, None)
        embedder, analyzer = BundledEmbedder(), Analyzer()
        prepared = [(embedder.embed_query(text).tolist(), analyzer.analyse(text), text)
                    for _, text in throughput.queries(args.queries, args.count)]
        store = MilvusStore(str(args.work / "store" / "gateway.db"))  # served by the server above

        def searched(fields: list[str], block: list) -> list[list[dict]]:
            rows = []
            for vector, terms, _ in block:
                dense = client.search(collection, data=[vector], anns_field="dense", limit=50, filter=boundary,
                                      output_fields=fields, search_params={"metric_type": "COSINE"})[0]
                sparse = client.search(collection, data=[terms], anns_field="sparse", limit=50, filter=boundary,
                                       output_fields=fields, search_params={"metric_type": "BM25"})[0]
                rows.append([hit["entity"] for hit in dense] + [hit["entity"] for hit in sparse])
            return rows

        def filled(with_boundary: bool, block: list) -> None:
            for rows in searched(["id"], block):
                keys = list(dict.fromkeys(row["id"] for row in rows))[:10]
                where = f"id in [{', '.join(literal(key) for key in keys)}]"
                if with_boundary:
                    where = MilvusStore._boundary(scope, where)
                found = client.query(collection, filter=where, output_fields=CHUNK_OUTPUT_FIELDS)
                assert len(found) == len(keys), (len(found), len(keys))

        def through_store(block: list) -> None:
            for vector, _, text in block:
                store.search_dense(scope, np.asarray(vector, dtype=np.float32), 50, None, frozenset())
                store.search_sparse(scope, text, 50, None, frozenset())

        variants = {"every-field": lambda block: searched(CHUNK_OUTPUT_FIELDS, block),
                    "identities": lambda block: searched(identities, block),
                    "keys": lambda block: searched(["id"], block),
                    "keys+modality": lambda block: searched(["id", "modality"], block),
                    "store": through_store,
                    "fill": lambda block: filled(False, block),
                    "fill+boundary": lambda block: filled(True, block)}
        for run in variants.values():
            run(prepared[:10])  # warm
        totals = {name: [0.0, 0.0, 0] for name in variants}
        pid = os.getpid()
        for round_ in range(args.rounds):
            start = (round_ * 20) % len(prepared)
            block = prepared[start:start + 20]
            names = list(variants)
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                own, tree = time.process_time(), tree_cpu_seconds(pid)
                variants[name](block)
                own_spent = time.process_time() - own
                totals[name][0] += own_spent
                totals[name][1] += tree_cpu_seconds(pid) - tree - own_spent
                totals[name][2] += len(block)
        store.close()
    print("| variant | this process, CPU ms/query | milvus-lite server, CPU ms/query | total | vs every-field |")
    print("| --- | --- | --- | --- | --- |")
    base = sum(totals["every-field"][:2]) / totals["every-field"][2]
    for name, (own, child, count) in totals.items():
        total = (own + child) / count
        print(f"| {name} | {1000 * own / count:.2f} | {1000 * child / count:.2f} | {1000 * total:.2f} "
              f"| {total / base:.2f}× |")


if __name__ == "__main__":
    main()
