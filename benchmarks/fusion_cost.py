"""CPU per query after the Milvus searches: fusing ids and scores and building only the `limit`
returned hits (what `CollectionRetriever.retrieve` does) against building a hit for every
candidate and fusing hits (the path before; still `combine(signal_lists(...))`).

    python benchmarks/fusion_cost.py DATA_DIR [--docs 400] [--queries 50] [--rounds 30]

DATA_DIR is a BEIR folder (corpus.jsonl, queries.jsonl). Both paths run interleaved in one
process on the same rows; the ratio is the figure to read.
"""
import argparse, asyncio, json, sys, tempfile, time, itertools, statistics as st
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway.tenancy.config import CollectionConfig, TrustTier
from gateway.tenancy.registry import CollectionRef, Scope
from gateway.embedding.base import CachedEmbedder
from gateway.embedding.bundled import BundledEmbedder
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever, combine
from gateway.storage.milvus import MilvusStore

p = argparse.ArgumentParser(); p.add_argument("data", type=Path)
p.add_argument("--docs", type=int, default=400); p.add_argument("--queries", type=int, default=50)
p.add_argument("--rounds", type=int, default=30); args = p.parse_args()
docs = [json.loads(l) for l in itertools.islice(open(args.data / "corpus.jsonl"), args.docs)]
queries = [json.loads(l)["text"] for l in itertools.islice(open(args.data / "queries.jsonl"), args.queries)]
store = MilvusStore(tempfile.mkdtemp() + "/g.db"); emb = CachedEmbedder(BundledEmbedder(batch_size=16), size=256)
ref = CollectionRef(Scope("bench", "docs", "cost"), CollectionConfig(trust_tier=TrustTier.FIRST_PARTY))
ingest_documents(store, emb, ref, [Document(d["_id"], d["text"], title=d["title"]) for d in docs], progress=False)
r = CollectionRetriever(store, emb, ref)
opts = SearchOptions(mode=Mode.HYBRID, limit=10, candidates=50)
rows = [asyncio.run(r._signal_rows(Query(q), opts)) for q in queries]
def new():
    for mode, rw in rows: r._fused(rw, opts, mode)
def old():
    for mode, rw in rows: combine({s: r._hits(x, s, mode) for s, x in rw.items()}, opts)
t = {"new": [], "old": []}
for _ in range(args.rounds):
    for name, f in (("old", old), ("new", new)):
        a = time.process_time(); f(); t[name].append((time.process_time() - a) / len(rows) * 1000)
o, n = st.median(t["old"]), st.median(t["new"])
print(f"candidates per signal: {len(rows[0][1]['dense'])}/{len(rows[0][1]['sparse'])}; CPU ms per query: all-candidate hits {o:.3f}, ids+scores {n:.3f}, ratio {n/o:.2f}")
