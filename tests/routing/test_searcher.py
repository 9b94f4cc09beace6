"""Routing, explicit choice and federated search on a real milvus-lite directory."""

import asyncio
import dataclasses

import pytest

from gateway.errors import ModeNotSupported, StorageUnavailable, UnknownCollection
from gateway.retrieval.trace import TraceRecorder
from gateway.routing.searcher import SearchRequest, Searcher
from gateway.settings import Settings
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry

ME = Principal("acme", Role.READER)


def search(searcher, **request):
    return asyncio.run(searcher.search(ME, SearchRequest(**request), TraceRecorder()))


def route_stage(result):
    stage = result.trace.stages[0]
    assert stage.name == "route"
    return stage.detail


def test_keyword_route_is_first_trace_stage_and_in_provenance(searcher):
    result = search(searcher, query="my ticket about a refund")
    detail = route_stage(result)
    assert (detail["router"], detail["matched"], detail["routes"]) == ("keyword", "ticket", ["support/tickets"])
    assert detail["candidates"] == ["keyword:tickets"]
    assert {h.collection for h in result.hits} == {"tickets"}
    assert result.hits[0].provenance.route == "keyword:support/tickets"


def test_metadata_route_and_namespace_restriction(searcher):
    result = search(searcher, query="refund", metadata={"source": "docs"})
    assert route_stage(result)["router"] == "metadata" and {h.collection for h in result.hits} == {"docs"}
    # 'price' routes to sales/leads, which is outside the namespace asked for: the default applies.
    inside = search(searcher, query="price of refunds", namespace="support")
    assert route_stage(inside)["route"] == "federated"
    assert {h.collection for h in inside.hits} <= {"docs", "tickets"}


def test_explicit_choice_bypasses_routers(searcher):
    one = search(searcher, query="my ticket about a refund", collection="docs")
    assert route_stage(one)["router"] == "explicit" and {h.collection for h in one.hits} == {"docs"}
    two = search(searcher, query="my ticket about a refund", collections=("docs", "sales/leads"))
    assert route_stage(two)["routes"] == ["support/docs", "sales/leads"]
    assert {h.collection for h in two.hits} == {"docs", "leads"}
    with pytest.raises(UnknownCollection, match="collection 'nope' is not in tenant 'acme'"):
        search(searcher, query="x", collections=("docs", "nope"))


def test_federated_keeps_collections_apart_and_records_ranks(searcher):
    result = search(searcher, query="refund card onboarding checklist", federated=True, limit=10)
    assert route_stage(result)["routes"] == ["support/docs", "support/tickets", "sales/leads"]
    keys = [h.qualified_id for h in result.hits]
    assert len(keys) == len(set(keys))
    # The same (namespace, source, chunk) in docs and in tickets is two documents: two hits.
    shared = [h for h in result.hits if h.source_id == "shared"]
    assert sorted(h.collection for h in shared) == ["docs", "tickets"]
    for hit in shared:
        signals = {s.signal for s in hit.provenance.scores}
        assert f"collection:support/{hit.collection}" in signals
    assert all(h.provenance.retriever == "federated" for h in result.hits)
    stage = result.trace.stages[1]
    assert stage.name == "federate" and stage.input_count == 3 and set(stage.detail["collections"]) == {
        "support/docs", "support/tickets", "sales/leads"}


def test_one_failing_collection_does_not_fail_the_query(searcher, lite_store):
    ref = searcher.registry.resolve("acme", "tickets", namespace="support")
    # Its backend stops answering (renamed away: a released collection would just be loaded again).
    lite_store._client.rename_collection(ref.scope.chunk_collection, ref.scope.chunk_collection + "_away")
    try:
        result = search(searcher, query="refund card", federated=True)
        assert {h.collection for h in result.hits} <= {"docs", "leads"} and result.hits
        [failure] = result.failures
        assert failure.collection == "support/tickets" and failure.code == "STORAGE_UNAVAILABLE"
        assert any("support/tickets" in w for w in result.trace.warnings)
        assert result.trace.stages[1].warnings
    finally:
        lite_store._client.rename_collection(ref.scope.chunk_collection + "_away", ref.scope.chunk_collection)
        lite_store._client.load_collection(ref.scope.chunk_collection)


def test_all_collections_failing_is_an_error(searcher, lite_store):
    refs = searcher.registry.collections("acme")
    for ref in refs:
        lite_store._client.rename_collection(ref.scope.chunk_collection, ref.scope.chunk_collection + "_away")
    try:
        with pytest.raises(StorageUnavailable, match="every collection of the federated search failed"):
            search(searcher, query="refund", federated=True)
    finally:
        for ref in refs:
            lite_store._client.rename_collection(ref.scope.chunk_collection + "_away", ref.scope.chunk_collection)
            lite_store._client.load_collection(ref.scope.chunk_collection)


def test_default_merge_calibrates_collections_with_different_modes(lite_store, embedder, searcher, tenant_spec):
    spec = {k: v for k, v in tenant_spec.items() if k != "federation"}
    config = TenantConfig.model_validate(spec)
    assert config.federation.merge == "signals"  # the default, with no federation section
    calibrated = Searcher(TenantRegistry({"acme": config}), lite_store, embedder, Settings())
    # sales/leads is BM25-only, the others hybrid: merged and calibrated, not refused.
    result = search(calibrated, query="price volume discount for refunds", federated=True)
    assert result.failures == () and result.hits[0].source_id == "L-1"
    assert all(0.0 <= h.score <= 1.0 for h in result.hits)
    assert {h.collection for h in result.hits} == {"docs", "tickets", "leads"}
    same = search(calibrated, query="refund card", collections=("docs", "tickets"))
    assert same.hits and {s.signal for s in same.hits[0].provenance.scores} >= {"dense", "sparse"}


def test_downgrades_and_ignored_parameters_are_in_the_trace(searcher):
    from gateway.retrieval.options import Fusion, Mode
    result = search(searcher, query="what is the of it", collection="docs")
    [stage] = [s for s in result.trace.stages if s.name == "retrieve:support/docs"]
    assert stage.detail["mode"] == "dense" and "hybrid search ran dense only" in stage.warnings[0]
    assert any("hybrid search ran dense only" in w for w in result.trace.warnings)
    assert result.hits and all(h.provenance.mode == "dense" for h in result.hits)
    dense = search(searcher, query="refund card", collection="docs", mode=Mode.DENSE, fusion=Fusion.RRF, alpha=0.2)
    warnings = [w for s in dense.trace.stages for w in s.warnings]
    assert any(w.startswith("fusion 'rrf' ignored") for w in warnings)
    assert any(w.startswith("alpha 0.2 ignored") for w in warnings)
    federated = search(searcher, query="the of it", federated=True)
    [fed] = [s for s in federated.trace.stages if s.name == "federate"]
    assert any("hybrid search ran dense only" in w for w in fed.warnings)
    assert any("sparse search found nothing" in w for w in fed.warnings)  # sales/leads is sparse-only
    plain = search(searcher, query="refund card", collection="docs")
    assert plain.trace.warnings == ()


def test_searching_a_collection_never_ingested_finds_nothing_and_creates_nothing(lite_store, embedder, searcher,
                                                                                  tenant_spec):
    # A reader must not write: a search that created the empty collection raced an ingest in another process.
    spec = {**tenant_spec, "namespaces": {**tenant_spec["namespaces"],
                                          "empty": {"collections": {"fresh": {"trust_tier": "first-party"}}}}}
    registry = TenantRegistry({"acme": TenantConfig.model_validate(spec)})
    fresh = registry.resolve("acme", "fresh", namespace="empty")
    lite_store.drop(fresh.scope)
    searcher = Searcher(registry, lite_store, embedder, Settings())
    assert search(searcher, query="refund card", collection="fresh", namespace="empty").hits == ()
    federated = search(searcher, query="refund card", federated=True)
    assert federated.failures == () and {h.collection for h in federated.hits} == {"docs", "tickets", "leads"}
    assert not lite_store.exists(fresh.scope)


def _held_searcher(lite_store, embedder, collections):
    from gateway.ingest.loaders import Document
    from gateway.ingest.sync import ingest_documents

    config = {"id": "acme", "namespaces": {"kb": {"collections": collections}}}
    registry = TenantRegistry({"acme": TenantConfig.model_validate(config)})
    for name in collections:
        ref = registry.resolve("acme", name, namespace="kb")
        lite_store.drop(ref.scope)
        ingest_documents(lite_store, embedder, ref, [
            Document("public", "Refunds are paid back within five days.", metadata={"status": "live"}),
            Document("draft", "Refunds draft: paid back within ten days.", metadata={"status": "draft"}),
            Document("bare", "Refunds for gift cards are never paid back.")], progress=False)
    return Searcher(registry, lite_store, embedder, Settings())


def test_a_collections_default_filter_holds_every_search_and_shows_in_the_trace(lite_store, embedder):
    compiled = '(metadata["status"] != "draft") or (metadata["status"] is null)'
    from gateway.retrieval.options import Mode
    from gateway.storage.filters import Condition, Op

    held = {"trust_tier": "first-party", "metadata_fields": ["status"],
            # `ne` alone would also drop rows without the key (Milvus compares a missing key as null).
            "search": {"filter": {"or": [{"field": "metadata.status", "op": "ne", "value": "draft"},
                                         {"field": "metadata.status", "op": "exists", "value": False}]}}}
    searcher = _held_searcher(lite_store, embedder, {"held": held, "open": {"trust_tier": "first-party"}})
    for mode in ("dense", "sparse", "hybrid"):
        result = search(searcher, query="refunds paid back", collection="held", namespace="kb", mode=Mode(mode))
        assert {h.source_id for h in result.hits} == {"public", "bare"}, mode
        stage = next(s for s in result.trace.stages if s.name == "retrieve:kb/held")
        assert stage.detail["defaultFilters"] == {"kb/held": compiled}
    # ANDed with the request's own filter.
    both = search(searcher, query="refunds paid back", collection="held", namespace="kb",
                  filter=Condition("metadata.status", Op.EXISTS, True))
    assert [h.source_id for h in both.hits] == ["public"]
    # A collection without one is not held to another's; federated, each is held to its own.
    federated = search(searcher, query="refunds paid back", namespace="kb", collections=("held", "open"))
    assert {(h.collection, h.source_id) for h in federated.hits} == {
        ("held", "public"), ("held", "bare"), ("open", "public"), ("open", "draft"), ("open", "bare")}
    stage = next(s for s in federated.trace.stages if s.name == "federate")
    assert stage.detail["defaultFilters"] == {"kb/held": compiled}
    none = search(searcher, query="refunds paid back", collection="held", namespace="kb",
                  filter=Condition("metadata.status", Op.EQ, "draft"))
    assert none.hits == () and any("the default filter (search.filter) of kb/held" in w for w in none.trace.warnings)


def test_a_collection_is_indexed_and_searched_in_its_language(lite_store, embedder):
    from gateway.ingest.loaders import Document
    from gateway.ingest.sync import ingest_documents
    from gateway.retrieval.options import Mode

    config = {"id": "acme", "namespaces": {"kb": {"collections": {
        "de": {"trust_tier": "first-party", "language": "de", "mode": "sparse"},
        "en": {"trust_tier": "first-party", "mode": "sparse"},
        "codes": {"trust_tier": "first-party", "language": "none", "mode": "sparse"}}}}}
    registry = TenantRegistry({"acme": TenantConfig.model_validate(config)})
    docs = [Document("haeuser", "Die Häuser der Stadt werden im Sommer gestrichen."),
            Document("kinder", "Das Kind spielt mit den anderen Kindern im Garten."),
            Document("code", "Fehler THE-42 tritt auf, wenn das Netz fehlt.")]
    for name in ("de", "en", "codes"):
        ref = registry.resolve("acme", name, namespace="kb")
        lite_store.drop(ref.scope)
        ingest_documents(lite_store, embedder, ref, docs, progress=False)
    searcher = Searcher(registry, lite_store, embedder, Settings())

    def found(collection, query):
        result = search(searcher, query=query, collection=collection, namespace="kb", mode=Mode.SPARSE)
        return [h.source_id for h in result.hits]

    # German stems: "Haus" finds "Häuser", "Kinder" finds "Kind"; English analysis matches neither form.
    assert found("de", "Haus") == ["haeuser"] and found("en", "Haus") == []
    assert found("de", "Kinder") == ["kinder"]
    # German stop words are dropped from the query: "die" alone has no BM25 terms.
    assert found("de", "die") == [] and found("en", "die") == ["haeuser"]
    # `none` keeps English stop words and every token: "the" of THE-42 is a term there.
    assert found("codes", "the 42") == ["code"] and found("en", "the") == []
    # Highlights read each hit in its collection's language: "Haus" marks "Häuser" in German only.
    result = search(searcher, query="Haus", collection="de", namespace="kb", mode=Mode.SPARSE)
    [marks] = asyncio.run(searcher.highlight(ME, "Haus", None, result.hits))
    assert [(s.term, docs[0].text[s.start:s.end]) for s in marks.spans] == [("haus", "Häuser")]
    hit = result.hits[0]
    english = dataclasses.replace(hit, collection="en")
    [plain] = asyncio.run(searcher.highlight(ME, "Haus", None, [english]))
    assert plain.spans == ()
