"""Inferred edges searched by source: direction, minimum similarity, order and limit."""

import asyncio

import pytest

from gateway.errors import InvalidInput, LimitExceeded, UnknownCollection
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.routing.graph import FoundEdge, inferred_edges
from gateway.storage.edges import Direction, Edge, EdgeStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry
from tests.conftest import make_ref


def test_a_sources_edges_by_direction_and_similarity_most_similar_first(lite_store):
    ref = make_ref("edges", collection="searched")
    lite_store.drop(ref.scope)
    edges = EdgeStore(lite_store)
    assert edges.search(ref.scope, "a") == []  # no edge collection yet
    edges.replace(ref.scope, ["edges/a/0", "edges/a/1", "edges/b/0"], [
        Edge("edges/a/0", "a", "b", 0.7), Edge("edges/a/1", "a", "c", 0.9), Edge("edges/b/0", "b", "a", 0.8),
        Edge("edges/b/0", "b", "c", 0.95)])
    assert [(e.from_row, e.to_source) for e in edges.search(ref.scope, "a")] == [
        ("edges/a/1", "c"), ("edges/b/0", "a"), ("edges/a/0", "b")]
    assert [e.to_source for e in edges.search(ref.scope, "a", Direction.OUT)] == ["c", "b"]
    assert [e.from_source for e in edges.search(ref.scope, "a", Direction.IN)] == ["b"]
    # Compared as stored (float32): a minimum of 0.7 keeps the edge stored as 0.7.
    assert [e.to_source for e in edges.search(ref.scope, "a", Direction.OUT, min_similarity=0.7)] == ["c", "b"]
    assert [e.to_source for e in edges.search(ref.scope, "a", Direction.OUT, min_similarity=0.8)] == ["c"]
    assert len(edges.search(ref.scope, "a", limit=1)) == 1
    # A source id is a value, never part of the expression.
    assert edges.search(ref.scope, 'a" or from_source != "') == []


def test_inferred_edges_of_an_ingested_collection_through_the_tenant_boundary(lite_store, embedder):
    config = TenantConfig.model_validate({"id": "acme", "namespaces": {"links": {"collections": {
        "inferred": {"trust_tier": "first-party", "graph": {"infer_threshold": 0.6, "infer_per_node": 2}},
        "plain": {"trust_tier": "first-party"}}}}})
    registry = TenantRegistry({"acme": config})
    ref = registry.resolve("acme", "inferred", namespace="links")
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, [
        Document("refunds", "Refunds are paid back to the original card within ten business days."),
        Document("card-refunds", "Card refunds are paid back to the original card within ten business days."),
        Document("kittens", "Kittens sleep for most of the day and play at night.")], progress=False)
    me = Principal("acme", Role.READER)
    found = asyncio.run(inferred_edges(registry, lite_store, me, "links", "inferred", "refunds", Direction.OUT))
    assert found.edges and found.edges[0].to_source == "card-refunds" and found.edges[0].from_chunk == "0"
    assert all(isinstance(e, FoundEdge) and e.similarity >= 0.6 and e.to_source != "kittens" for e in found.edges)
    # A collection without inferred edges has none; another tenant's collection is unknown.
    assert asyncio.run(inferred_edges(registry, lite_store, me, "links", "plain", "refunds")).edges == ()
    with pytest.raises(UnknownCollection):
        asyncio.run(inferred_edges(registry, lite_store, Principal("acme", Role.READER), "links", "globex", "x"))
    with pytest.raises(LimitExceeded, match="limit 101 is outside 1 to 100 edges"):
        asyncio.run(inferred_edges(registry, lite_store, me, "links", "inferred", "refunds", limit=101))
    with pytest.raises(InvalidInput, match="minSimilarity 1.5 is outside 0 to 1"):
        asyncio.run(inferred_edges(registry, lite_store, me, "links", "inferred", "refunds", min_similarity=1.5))
