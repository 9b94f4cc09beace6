"""BM25 in a collection's language against English analysis, on a small judged non-English set.

Indexes the set's documents twice in a fresh milvus-lite directory — once with `language` set to
the set's language, once with the default English analysis — and runs every question as a sparse
(BM25) and a hybrid search through the gateway's Searcher. Prints nDCG@10, MRR@10 and Recall@5 per
collection and mode (binary relevance; a source counts once, by its best chunk). Deterministic.

    python benchmarks/languages.py                                  # benchmarks/data/languages_de.json
    python benchmarks/languages.py --set benchmarks/data/languages_fr.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import tempfile
from pathlib import Path

from gateway.embedding.base import CachedEmbedder
from gateway.embedding.bundled import BundledEmbedder
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.options import Mode
from gateway.routing.searcher import Searcher, SearchRequest
from gateway.settings import Settings
from gateway.storage.milvus import MilvusStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry

ROOT = Path(__file__).resolve().parents[1]
K = 10


def metrics(ranked: list[str], relevant: set[str]) -> tuple[float, float, float]:
    """nDCG@10, MRR@10 and Recall@5 of one ranking (binary relevance)."""
    dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(ranked[:K]) if s in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), K)))
    rr = next((1 / (i + 1) for i, s in enumerate(ranked[:K]) if s in relevant), 0.0)
    recall = len(set(ranked[:5]) & relevant) / len(relevant)
    return dcg / ideal, rr, recall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=ROOT / "benchmarks" / "data" / "languages_de.json")
    args = parser.parse_args()
    data = json.loads(args.set.read_text(encoding="utf-8"))
    language = data["language"]
    collections = {language: {"trust_tier": "first-party", "language": language},
                   "en": {"trust_tier": "first-party", "language": "en"}}
    registry = TenantRegistry({"bench": TenantConfig.model_validate(
        {"id": "bench", "namespaces": {"lang": {"collections": collections}}})})
    documents = [Document(d["id"], d["text"]) for d in data["documents"]]
    embedder = CachedEmbedder(BundledEmbedder(batch_size=8), size=1024)
    with tempfile.TemporaryDirectory() as directory:
        store = MilvusStore(str(Path(directory) / "bench.db"))
        try:
            for name in collections:
                ingest_documents(store, embedder, registry.resolve("bench", name, namespace="lang"), documents,
                                 progress=False)
            searcher = Searcher(registry, store, embedder, Settings())
            me = Principal("bench", Role.READER)
            print(f"{len(documents)} documents, {len(data['queries'])} questions ({args.set.name})")
            print(f"{'analysis':10} {'mode':7} {'nDCG@10':>8} {'MRR@10':>7} {'R@5':>6}")
            for name in collections:
                for mode in (Mode.SPARSE, Mode.HYBRID):
                    totals = [0.0, 0.0, 0.0]
                    for q in data["queries"]:
                        result = asyncio.run(searcher.search(me, SearchRequest(
                            q["text"], collection=name, namespace="lang", mode=mode, limit=K)))
                        ranked = list(dict.fromkeys(h.source_id for h in result.hits))
                        for i, value in enumerate(metrics(ranked, set(q["relevant"]))):
                            totals[i] += value
                    n = len(data["queries"])
                    print(f"{name:10} {mode.value:7} {totals[0] / n:8.4f} {totals[1] / n:7.4f} {totals[2] / n:6.4f}")
        finally:
            store.close()


if __name__ == "__main__":
    main()
