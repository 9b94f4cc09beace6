"""Memory collections on milvus-lite: the score by hand, filters by user and type, the writer's checks."""

import asyncio

import pytest

from gateway.conversations.memory import DAY_MS, MemoryRetriever, MemoryWriter, memory_score, recency
from gateway.errors import Forbidden, InvalidInput
from gateway.retrieval.options import Mode, Query
from gateway.retrieval.defaults import options_for
from gateway.storage.filters import Condition, Op
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import MemoryConfig, Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry

NOW = 1_750_000_000.0
TENANT = TenantConfig.model_validate({"id": "agentco", "namespaces": {"agent": {"collections": {
    "memories": {"trust_tier": "user-generated", "kind": "memory", "mode": "dense"},
    "docs": {"trust_tier": "first-party"}}}}})
REGISTRY = TenantRegistry({"agentco": TENANT})
WRITER = Principal("agentco", Role.WRITER)


def test_recency_halves_every_half_life_and_the_score_is_the_weighted_sum():
    assert recency(0, 0, 7) == 1.0
    assert recency(0, 7 * DAY_MS, 7) == 0.5
    assert recency(0, 14 * DAY_MS, 7) == 0.25
    assert recency(5 * DAY_MS, 0, 7) == 1.0  # a clock skewed into the future counts as now
    assert memory_score(0.5, 0.8, 1.0, MemoryConfig()) == pytest.approx(0.3 * 0.5 + 0.5 * 0.8 + 0.2 * 1.0)


def test_memories_rank_by_recency_relevance_and_importance(lite_store, embedder):
    clock = {"now": NOW}
    writer = MemoryWriter(REGISTRY, lite_store, embedder, clock=lambda: clock["now"])

    async def add(content, user, kind, importance, days_ago, memory_id):
        clock["now"] = NOW - days_ago * 86_400
        return await writer.add(WRITER, "agent", "memories", content, user_id=user, memory_type=kind,
                                importance=importance, memory_id=memory_id)

    async def scenario():
        await add("The user prefers invoices as PDF by email", "u1", "semantic", 0.9, 0, "pdf-now")
        await add("The user prefers invoices as PDF by email", "u1", "semantic", 0.9, 28, "pdf-old")
        await add("The user prefers invoices as PDF by email", "u1", "semantic", 0.1, 0, "pdf-minor")
        await add("The user asked about invoices on Monday", "u2", "episodic", 0.5, 0, "other-user")
        ref = REGISTRY.resolve("agentco", "memories", namespace="agent")
        retriever = MemoryRetriever(lite_store, embedder, ref, clock=lambda: NOW)
        everyone = await retriever.retrieve(Query("how does the user want invoices?"),
                                            options_for(ref.config, limit=10))
        only_u1 = await retriever.retrieve(Query("how does the user want invoices?"), options_for(
            ref.config, limit=10, filter=Condition("metadata.user_id", Op.EQ, "u1")))
        episodic = await retriever.retrieve(Query("invoices"), options_for(
            ref.config, limit=10, filter=Condition("metadata.memory_type", Op.EQ, "episodic")))
        return everyone, only_u1, episodic

    everyone, only_u1, episodic = asyncio.run(scenario())
    order = [h.source_id for h in only_u1]
    assert order[0] == "pdf-now" and set(order) == {"pdf-now", "pdf-old", "pdf-minor"}
    for hit in everyone:
        parts = {s.signal: s.raw for s in hit.provenance.scores}
        assert hit.score == pytest.approx(memory_score(parts["memory:recency"], parts["memory:relevance"],
                                                       parts["memory:importance"], MemoryConfig()))
        assert hit.provenance.retriever == "memory"
    by_id = {h.source_id: {s.signal: s.raw for s in h.provenance.scores} for h in everyone}
    # Same text: same relevance. 28 days is four half-lives (1/16); importance 0.1 vs 0.9.
    assert by_id["pdf-old"]["memory:relevance"] == pytest.approx(by_id["pdf-now"]["memory:relevance"], abs=1e-6)
    assert by_id["pdf-old"]["memory:recency"] == pytest.approx(1 / 16)
    assert by_id["pdf-minor"]["memory:importance"] == pytest.approx(0.1)
    assert [h.source_id for h in episodic] == ["other-user"]
    # Memory rows hash like ingested chunks, so `gateway verify` checks them like any collection.
    from gateway.ingest.verify import verify_collection
    ref = REGISTRY.resolve("agentco", "memories", namespace="agent")
    check = verify_collection(lite_store, ref, model=embedder.name, dim=embedder.dim)
    assert check.ok and check.chunks == 4, check.summary()


def test_the_writer_refuses_what_is_not_a_memory(lite_store, embedder):
    writer = MemoryWriter(REGISTRY, lite_store, embedder)

    def add(**overrides):
        args = {"user_id": "u1", "memory_type": "semantic", "importance": 0.5} | overrides
        collection = args.pop("collection", "memories")
        content = args.pop("content", "a fact")
        principal = args.pop("principal", WRITER)
        return asyncio.run(writer.add(principal, "agent", collection, content, **args))

    with pytest.raises(InvalidInput, match="'agent/docs' is kind 'documents', not 'memory'; .*: agent/memories"):
        add(collection="docs")
    with pytest.raises(InvalidInput, match="memoryType 'mood' is not a type .* allowed: episodic, procedural, semantic"):
        add(memory_type="mood")
    with pytest.raises(InvalidInput, match="importance 1.5 is out of range; allowed: 0 to 1"):
        add(importance=1.5)
    with pytest.raises(InvalidInput, match="userId 'u 1' is not allowed"):
        add(user_id="u 1")
    with pytest.raises(InvalidInput, match="memory content is 3 characters; send 1 to 4000"):
        add(content="   ")
    with pytest.raises(Forbidden, match="may not add memories"):
        add(principal=Principal("agentco", Role.READER))


def test_memory_settings_belong_to_memory_collections_only():
    with pytest.raises(ValueError, match="`memory` settings need kind: memory"):
        TenantConfig.model_validate({"id": "x", "namespaces": {"n": {"collections": {
            "c": {"trust_tier": "first-party", "memory": {"alpha": 1}}}}}})
    with pytest.raises(ValueError, match="alpha, beta and gamma are all 0"):
        MemoryConfig(alpha=0, beta=0, gamma=0)
    memory = TENANT.namespaces["agent"].collections["memories"]
    assert memory.metadata_fields == ("user_id", "memory_type", "importance") and memory.mode is Mode.DENSE
