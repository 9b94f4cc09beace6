"""FederatedRetriever on a real milvus-lite directory: timeouts and the signal merge's depth."""

import asyncio

from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.routing.federated import FederatedRetriever, Member


def test_slow_collection_times_out_and_is_reported(lite_store, embedder, searcher):
    class Delayed(CollectionRetriever):
        async def signal_lists(self, query, options):
            await asyncio.sleep(2)  # a collection whose backend answers too late
            return await super().signal_lists(query, options)

    docs, tickets = (searcher.registry.resolve("acme", c, namespace="support") for c in ("docs", "tickets"))
    options = SearchOptions(mode=Mode.HYBRID, limit=5)
    members = [Member(CollectionRetriever(lite_store, embedder, docs), options),
               Member(Delayed(lite_store, embedder, tickets), options)]
    outcome = asyncio.run(FederatedRetriever(members, timeout_s=0.2).retrieve(Query("refund card"), 5))
    assert outcome.hits and {h.collection for h in outcome.hits} == {"docs"}
    assert [(f.collection, f.code, f.reason) for f in outcome.failures] == [
        ("support/tickets", "TIMEOUT", "timed out after 0.2 s")]



def test_signal_merge_cuts_merged_lists_to_one_collections_depth(lite_store, embedder, searcher):
    refs = [searcher.registry.resolve("acme", c, namespace="support") for c in ("docs", "tickets")]
    options = SearchOptions(mode=Mode.HYBRID, limit=10, candidates=10)
    members = [Member(CollectionRetriever(lite_store, embedder, ref), options) for ref in refs]
    vector = embedder.embed_query("refund card checklist")
    outcome = asyncio.run(FederatedRetriever(members, merge="signals", candidates=2)
                          .retrieve(Query("refund card checklist", vector), 10))
    ranks = [s.rank for h in outcome.hits for s in h.provenance.scores if s.signal in ("dense", "sparse")]
    assert ranks and max(ranks) <= 2  # each merged signal list kept its best 2 only
    assert len(outcome.hits) <= 4
