"""FederatedRetriever on a real milvus-lite directory: timeouts and the signal merge's depth."""

import asyncio

import pytest

from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.routing.federated import FederatedRetriever, Member


def test_slow_collection_times_out_and_is_reported(lite_store, embedder, searcher):
    class Delayed(CollectionRetriever):
        async def signal_lists(self, query, options):
            await asyncio.sleep(60)  # a collection whose backend answers too late
            return await super().signal_lists(query, options)

    docs, tickets = (searcher.registry.resolve("acme", c, namespace="support") for c in ("docs", "tickets"))
    options = SearchOptions(mode=Mode.HYBRID, limit=5)
    members = [Member(CollectionRetriever(lite_store, embedder, docs), options),
               Member(Delayed(lite_store, embedder, tickets), options)]
    # Long enough for a real search on a loaded machine (0.2 s once timed out both); the late one is cancelled.
    outcome = asyncio.run(FederatedRetriever(members, timeout_s=5).retrieve(Query("refund card"), 5))
    assert outcome.hits and {h.collection for h in outcome.hits} == {"docs"}
    assert [(f.collection, f.code, f.reason) for f in outcome.failures] == [
        ("support/tickets", "TIMEOUT", "timed out after 5 s")]



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


def test_calibrated_merge_scores_each_hit_by_its_own_collections_settings():
    from gateway.retrieval.options import Fusion
    from gateway.routing.federated import calibrated
    from tests.retrieval.stages.hits import make_hit

    def hit(source, score, collection, signal, rank):
        h = make_hit(source, score, collection=collection)
        return dataclasses.replace(h, provenance=dataclasses.replace(
            h.provenance, scores=(SignalScore(signal, score, rank),)))

    import dataclasses
    from gateway.retrieval.hit import SignalScore
    hybrid = SearchOptions(mode=Mode.HYBRID, limit=10, fusion=Fusion.WEIGHTED, alpha=0.5)
    sparse_only = SearchOptions(mode=Mode.SPARSE, limit=10, fusion=Fusion.RRF)
    merged = {
        "dense": [hit("a", 0.9, "docs", "dense", 1), hit("b", 0.5, "docs", "dense", 2)],
        "sparse": [hit("s", 12.0, "tickets", "sparse", 1), hit("a", 8.0, "docs", "sparse", 2),
                   hit("b", 2.0, "docs", "sparse", 3), hit("a", 1.0, "tickets", "sparse", 4)],
    }
    settings = {("support", "docs"): hybrid, ("support", "tickets"): sparse_only}
    out = calibrated(merged, settings, limit=10)
    scores = {(h.collection, h.source_id): round(h.score, 4) for h in out}
    # docs/a: 0.5 * minmax dense (1.0) + 0.5 * minmax sparse ((8 - 1) / 11); docs/b: 0 + 0.5 * (1 / 11).
    assert scores[("docs", "a")] == round(0.5 + 0.5 * 7 / 11, 4)
    assert scores[("docs", "b")] == round(0.5 * 1 / 11, 4)
    # tickets is BM25-only (its RRF setting aside): its sparse signal alone, on the shared min-max scale.
    assert scores[("tickets", "s")] == 1.0 and scores[("tickets", "a")] == 0.0
    # The same source in two collections stays two hits.
    assert sorted(h.collection for h in out if h.source_id == "a") == ["docs", "tickets"]


class _NoFill(CollectionRetriever):
    """A collection that fetches its stored fields in its searches, as before the fill existed."""

    fills = None


@pytest.mark.parametrize("merge", ["signals", "rrf", "dbsf"])
@pytest.mark.parametrize("fields", [None, frozenset({"text", "title"})])
def test_federated_members_search_identities_and_fill_only_the_merged_hits(lite_store, embedder, searcher,
                                                                             monkeypatch, merge, fields):
    refs = [searcher.registry.resolve("acme", c, namespace="support") for c in ("docs", "tickets")]
    options = SearchOptions(mode=Mode.HYBRID, limit=5, candidates=10, fields=fields)
    searched, filled = [], []
    real_dense, real_sparse, real_fill = lite_store.search_dense, lite_store.search_sparse, lite_store.fill
    monkeypatch.setattr(lite_store, "search_dense", lambda *a, **k: searched.append(a[4] if len(a) > 4 else None)
                        or real_dense(*a, **k))
    monkeypatch.setattr(lite_store, "search_sparse", lambda *a, **k: searched.append(a[4] if len(a) > 4 else None)
                        or real_sparse(*a, **k))
    monkeypatch.setattr(lite_store, "fill", lambda scope, rows, f=None: filled.append((scope.collection, len(rows), f))
                        or real_fill(scope, rows, f))
    query = Query("refund card checklist")
    outcome = asyncio.run(FederatedRetriever([Member(CollectionRetriever(lite_store, embedder, ref), options)
                                              for ref in refs], merge=merge).retrieve(query, 5))
    assert searched and set(searched) == {frozenset()}
    per_collection = {c: sum(1 for h in outcome.hits if h.collection == c) for c in ("docs", "tickets")}
    assert sorted((c, n, f) for c, n, f in filled) == sorted((c, n, fields) for c, n in per_collection.items() if n)
    # The same hits, fields and provenance as members that fetch their fields in the searches.
    monkeypatch.undo()
    before = asyncio.run(FederatedRetriever([Member(_NoFill(lite_store, embedder, ref), options) for ref in refs],
                                            merge=merge).retrieve(query, 5))
    assert outcome.hits == before.hits and all(h.content for h in outcome.hits)


@pytest.mark.parametrize("merge", ["signals", "rrf", "dbsf"])
def test_collection_weights_scale_a_collections_hits_in_every_merge(lite_store, embedder, searcher, merge):
    refs = [searcher.registry.resolve("acme", c, namespace="support") for c in ("docs", "tickets")]
    options = SearchOptions(mode=Mode.HYBRID, limit=4, candidates=10)
    members = [Member(CollectionRetriever(lite_store, embedder, ref), options) for ref in refs]
    query = Query("refund card checklist")

    def merged(weights):
        return asyncio.run(FederatedRetriever(members, merge=merge, weights=weights).retrieve(query, 4)).hits

    plain = merged(None)
    assert merged({("support", "docs"): 1.0, ("support", "tickets"): 1.0}) == plain
    # Tickets weighed far up: its hits lead; weighed to zero: they trail every docs hit.
    up = merged({("support", "tickets"): 50.0})
    assert [h.collection for h in up[:2]] == ["tickets", "tickets"]
    down = merged({("support", "tickets"): 0.0})
    collections = [h.collection for h in down]
    assert collections == sorted(collections)  # docs before tickets
    if merge == "signals":
        # A weight scales the merged score: the weighted hit's score is the unweighted one's times it.
        unweighted = {h.qualified_id: h.score for h in merged({("support", "docs"): 1.0, ("support", "tickets"): 1.0})}
        doubled = merged({("support", "docs"): 2.0, ("support", "tickets"): 1.0})
        shared = [h for h in doubled if h.qualified_id in unweighted]
        assert {h.collection for h in shared} == {"docs", "tickets"}
        assert all(h.score == pytest.approx(unweighted[h.qualified_id] * (2.0 if h.collection == "docs" else 1.0))
                   for h in shared)


def test_federation_weights_must_name_a_collection_of_the_tenant(tenant_spec):
    from gateway.tenancy.config import TenantConfig

    config = TenantConfig.model_validate({**tenant_spec, "federation": {"weights": {"tickets": 2, "sales/leads": 0.5}}})
    assert config.federation_weights() == {("support", "tickets"): 2.0, ("sales", "leads"): 0.5}
    with pytest.raises(ValueError, match="federation.weights names 'tikets', which is not a collection of tenant "
                                         "'acme'.*allowed: support/docs, support/tickets, sales/leads"):
        TenantConfig.model_validate({**tenant_spec, "federation": {"weights": {"tikets": 2}}})
    with pytest.raises(ValueError, match="less than or equal to 100"):
        TenantConfig.model_validate({**tenant_spec, "federation": {"weights": {"tickets": 101}}})


def test_a_federated_search_weighs_collections_by_the_tenant_file_and_traces_the_weights(lite_store, embedder,
                                                                                      tenant_spec):
    from gateway.routing.searcher import SearchRequest, Searcher
    from gateway.settings import Settings
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role, TenantConfig
    from gateway.tenancy.registry import TenantRegistry

    def search(weights):
        config = TenantConfig.model_validate({**tenant_spec, "federation": {"merge": "signals", "weights": weights}})
        searcher = Searcher(TenantRegistry({"acme": config}), lite_store, embedder, Settings())
        return asyncio.run(searcher.search(Principal("acme", Role.READER),
                                           SearchRequest("refund card checklist", namespace="support", federated=True,
                                                         limit=3)))

    result = search({"support/tickets": 50})
    assert [h.collection for h in result.hits[:2]] == ["tickets", "tickets"]
    federate = next(s for s in result.trace.stages if s.name == "federate")
    assert federate.detail["weights"] == {"support/docs": 1.0, "support/tickets": 50.0}
    assert "weights" not in next(s for s in search({}).trace.stages if s.name == "federate").detail


def test_a_signal_merge_normalises_bm25_against_the_best_of_every_collection(lite_store, embedder, searcher):
    refs = [searcher.registry.resolve("acme", c, namespace="support") for c in ("docs", "tickets")]
    options = SearchOptions(mode=Mode.SPARSE, limit=6, candidates=10)
    members = [Member(CollectionRetriever(lite_store, embedder, ref), options) for ref in refs]
    hits = asyncio.run(FederatedRetriever(members, merge="signals").retrieve(Query("refund card"), 6)).hits
    sparse = [next(s for s in h.provenance.scores if s.signal == "sparse") for h in hits]
    assert {h.collection for h in hits} == {"docs", "tickets"}
    best = max(s.raw for s in sparse)
    assert [s.normalized for s in sparse] == pytest.approx([s.raw / best for s in sparse])
    assert sum(s.normalized == 1.0 for s in sparse) == 1  # one best over both collections, not one each
