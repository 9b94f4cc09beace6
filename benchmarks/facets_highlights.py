"""What facets and highlights add to a search.

Facets: on a milvus-lite collection of `--rows` synthetic chunks (random 384-d unit vectors,
text from a 2,000-word vocabulary, metadata status/year), the wall time per query of

  search       the plain search: limit 10, stored text and metadata fetched for the 10 returned
  facets@D     the facet pass: the same retrieval at limit D, fetching metadata only
               (what `facets` adds to a search with facetDepth D)

for dense and hybrid mode. Highlights: the wall time of `highlight` for 10 hits of ~800
characters that share no word with the query (each then embeds its first 8 sentences with the
bundled MiniLM, the upper bound), and for 10 hits that do (term spans only).

    python benchmarks/facets_highlights.py --rows 10000 --queries 30
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.embedding.bundled import BundledEmbedder  # noqa: E402
from gateway.retrieval.defaults import options_for  # noqa: E402
from gateway.retrieval.highlights import highlight  # noqa: E402
from gateway.retrieval.hit import Hit, Provenance  # noqa: E402
from gateway.retrieval.options import Mode, Query  # noqa: E402
from gateway.retrieval.retrievers import CollectionRetriever  # noqa: E402
from gateway.storage.analyzer import Analyzer  # noqa: E402
from gateway.storage.milvus import ChunkRecord, MilvusStore  # noqa: E402
from gateway.storage.schema import Scope  # noqa: E402
from gateway.tenancy.config import CollectionConfig, TrustTier  # noqa: E402
from gateway.tenancy.registry import CollectionRef  # noqa: E402

DIM = 384


class _FixedVectors:
    """The query's vector is given per query: no model in the timed loop."""

    name, dim = "fixed", DIM

    def __init__(self) -> None:
        self.next: np.ndarray | None = None

    def embed_query(self, text: str, tenant: str = "") -> np.ndarray:
        assert self.next is not None
        return self.next

    def embed_documents(self, texts):  # pragma: no cover - not used
        raise NotImplementedError


def _unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _build(store: MilvusStore, ref: CollectionRef, rows: int, words: list[str]) -> None:
    rng, pick = np.random.default_rng(7), random.Random(7)
    store.ensure(ref.scope)
    batch = []
    for i in range(rows):
        text = " ".join(pick.choice(words) for _ in range(120))
        batch.append(ChunkRecord(source_id=f"s{i // 4}", chunk_id=str(i % 4), parent_key="", text=text,
                                 title="", content_hash=f"h{i}", created_at=1, updated_at=1, dense=_unit(rng),
                                 metadata={"status": pick.choice(["open", "closed", "pending"]),
                                           "year": pick.choice([2024, 2025, 2026])}))
        if len(batch) == 2000:
            store.upsert_chunks(ref.scope, batch)
            batch = []
    store.upsert_chunks(ref.scope, batch)


async def _time(retriever: CollectionRetriever, embedder: _FixedVectors, queries: list[tuple[str, np.ndarray]],
                ref: CollectionRef, mode: Mode, limit: int, fields: frozenset[str]) -> float:
    import dataclasses

    took = []
    for text, vector in queries:
        embedder.next = vector
        options = dataclasses.replace(options_for(ref.config, mode=mode, limit=limit), fields=fields)
        started = time.perf_counter()
        await retriever.retrieve(Query(text), options)
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


def _hit(content: str) -> Hit:
    return Hit(namespace="n", collection="c", source_id="s", chunk_id="0", content=content, score=1.0,
               provenance=Provenance(tenant="t", namespace="n", collection="c", trust_tier="first-party",
                                     retriever="collection", mode="dense"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    pick = random.Random(11)
    words = [f"w{n}x" for n in range(2000)]
    rng = np.random.default_rng(11)
    queries = [(" ".join(pick.choice(words) for _ in range(3)), _unit(rng)) for _ in range(args.queries)]
    with tempfile.TemporaryDirectory() as work:
        store = MilvusStore(str(Path(work) / "gateway.db"), dim=DIM)
        ref = CollectionRef(Scope("bench", "ns", "docs"), CollectionConfig(trust_tier=TrustTier.FIRST_PARTY,
                                                                           metadata_fields=("status", "year")))
        _build(store, ref, args.rows, words)
        embedder = _FixedVectors()
        retriever = CollectionRetriever(store, embedder, ref)  # type: ignore[arg-type]
        print(f"{args.rows} rows, {args.queries} queries, median wall ms per query")
        for mode in (Mode.DENSE, Mode.HYBRID):
            base = asyncio.run(_time(retriever, embedder, queries, ref, mode, 10, frozenset({"text", "metadata"})))
            row = [f"{mode.value:7} search {base:7.1f}"]
            for depth in (200, 1000):
                took = asyncio.run(_time(retriever, embedder, queries, ref, mode, depth, frozenset({"metadata"})))
                row.append(f"facets@{depth} {took:7.1f}")
            print("  ".join(row))
        store.close()

    model = BundledEmbedder()
    analyzer = Analyzer()
    sentence = "Customers who cancel within two weeks of the charge receive their payment back on the card. "
    unmarked = [_hit((sentence * 10)[:800]) for _ in range(10)]
    marked = [_hit(("Refunds are issued within 14 days. " * 25)[:800]) for _ in range(10)]
    query = "refund policy"
    vector = model.embed_query(query)
    similarity = lambda texts: model.embed_documents(texts) @ vector  # noqa: E731
    for label, hits in (("no term (8 sentences a hit embedded)", unmarked), ("term spans only", marked)):
        took = []
        for _ in range(5):
            started = time.perf_counter()
            highlight(hits, query, lambda hit: analyzer, similarity)
            took.append((time.perf_counter() - started) * 1000)
        print(f"highlights, 10 hits, {label}: {statistics.median(took):.1f} ms")


if __name__ == "__main__":
    main()
