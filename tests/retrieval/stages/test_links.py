"""expand: 1-hop neighbours by metadata.links and by inferred similarity edges, on milvus-lite."""

import pytest

from gateway.errors import InvalidInput
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.pipeline import Pipeline, StageRequest
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.retrieval.stages.links import LinkExpand
from gateway.retrieval.trace import StageHandle, TraceRecorder
from gateway.storage.edges import EdgeStore
from gateway.storage.filters import Condition, Op
from gateway.tenancy.pipelines import ExpandParams
from tests.conftest import make_ref

DOCS = [
    Document("refunds", "Refunds are paid back to the original card within ten business days.",
             metadata={"links": ["billing", "missing-source"]}),
    Document("billing", "Invoices are issued monthly and list every charge of the workspace."),
    Document("kittens", "Kittens sleep for most of the day and play at night."),
    Document("card-refunds", "Card refunds are paid back to the original card within ten business days, "
                             "usually sooner."),
]


def _params(**values) -> ExpandParams:
    return ExpandParams.model_validate(values)


async def _seed(store, embedder, ref, query: str) -> list:
    """The `refunds` chunk as the only seed."""
    hits = await CollectionRetriever(store, embedder, ref).retrieve(Query(query), SearchOptions(mode=Mode.SPARSE,
                                                                                                   limit=4))
    return [h for h in hits if h.source_id == "refunds"]


async def test_links_add_the_linked_source_with_weight_and_via(lite_store, embedder):
    ref = make_ref("links", collection="linked")
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    seeds = await _seed(lite_store, embedder, ref, "original card refund ten business days")
    handle = StageHandle(1)
    out = await LinkExpand(_params(weight=0.5, edges="links"), lite_store, embedder).apply(
        StageRequest("when are refunds paid?", 5), seeds, handle)
    added = [h for h in out if h.provenance.via]
    assert [h.source_id for h in added] == ["billing"]  # a link to a missing source adds nothing
    # The only hit is the seed and the last within the limit: the neighbour scores as it does.
    assert added[0].score == pytest.approx(seeds[0].score)
    assert added[0].provenance.via == f"link from {seeds[0].qualified_id}"
    assert added[0].provenance.retriever == "expand"
    assert handle.detail["leads"] == 2 and handle.detail["added"] == [added[0].qualified_id]


@pytest.mark.parametrize("mode", [Mode.HYBRID, Mode.DENSE, Mode.SPARSE])
async def test_a_neighbour_reaches_the_client_in_every_mode(lite_store, embedder, mode):
    # `weight x seed` put the neighbour under every hit the search found (in hybrid, under an RRF
    # sum of ~0.016 when the hits score ~0.032), so the limit cut it while the trace said "added".
    ref = make_ref("links", collection=f"scale{mode.value}")
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, [
        DOCS[0], DOCS[1],
        Document("credit", "Store credit refunds are paid back to the original card account within ten days."),
    ], progress=False)
    question = "refunds paid back to the original card within ten business days"

    async def base(query, depth):
        hits = await CollectionRetriever(lite_store, embedder, ref).retrieve(
            Query(query.text), SearchOptions(mode=mode, limit=depth + 2))
        return [h for h in hits if h.source_id != "billing"]  # the neighbour is not a hit of its own

    recorder = TraceRecorder()
    pipeline = Pipeline("linked", [], [LinkExpand(_params(seeds=1, weight=0.5, edges="links"), lite_store, embedder)])
    out = await pipeline.run(StageRequest(question, 2), base, recorder)
    [stage] = recorder.finish().stages
    assert [h.source_id for h in out] == ["refunds", "billing"], [(h.source_id, h.score) for h in out]
    assert stage.detail["added"] == [out[1].qualified_id] and stage.detail["beyondLimit"] == []
    assert stage.input_count == 2  # `credit` was the second hit: the neighbour ranks between it and its seed


async def test_a_neighbour_past_the_limit_is_named_not_listed_as_added(lite_store, embedder):
    ref = make_ref("links", collection="pastlimit")
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    seeds = await _seed(lite_store, embedder, ref, "original card refund ten business days")
    handle = StageHandle(1)
    # weight 0: the neighbour ties the last hit within the limit, which stays ahead of it.
    out = await LinkExpand(_params(weight=0.0, edges="links"), lite_store, embedder).apply(
        StageRequest("when are refunds paid?", 1), seeds, handle)
    assert [h.source_id for h in out] == ["refunds", "billing"]
    assert handle.detail["added"] == [] and handle.detail["beyondLimit"] == [out[1].qualified_id]
    assert "1 neighbour(s) ranked past the limit of 1" in handle.warnings[0]


async def test_a_neighbour_must_pass_the_requests_filter(lite_store, embedder):
    ref = make_ref("links", collection="filtered")
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    seeds = await _seed(lite_store, embedder, ref, "original card refund ten business days")
    outside = Condition("source_id", Op.NE, "billing")  # the search excluded the linked source
    out = await LinkExpand(_params(weight=0.5, edges="links"), lite_store, embedder).apply(
        StageRequest("when are refunds paid?", 5, filter=outside), seeds, StageHandle(1))
    assert [h for h in out if h.provenance.via] == []


async def test_a_neighbour_must_pass_the_filter_the_caller_is_held_to_in_its_collection(lite_store, embedder):
    """A key bound to user u1 (the searcher holds it to metadata.user_id = u1 in memory collections)
    is not shown u2's rows by following a link."""
    ref = make_ref("links", collection="held", metadata_fields=("user_id",))
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, [
        Document("refunds", "Refunds are paid back to the original card within ten business days.",
                 metadata={"links": ["note-u1", "note-u2"], "user_id": "u1"}),
        Document("note-u1", "u1 wants refunds by bank transfer.", metadata={"user_id": "u1"}),
        Document("note-u2", "u2 wants refunds as store credit.", metadata={"user_id": "u2"})], progress=False)
    seeds = await _seed(lite_store, embedder, ref, "original card refund ten business days")
    held = {(ref.scope.namespace, ref.scope.collection): Condition("metadata.user_id", Op.EQ, "u1")}
    out = await LinkExpand(_params(edges="links"), lite_store, embedder).apply(
        StageRequest("refunds", 5, scope_filters=held), seeds, StageHandle(1))
    assert [h.source_id for h in out if h.provenance.via] == ["note-u1"]


async def test_inferred_edges_are_computed_at_ingest_and_followed(lite_store, embedder):
    ref = make_ref("links", collection="inferred", graph={"infer_threshold": 0.6, "infer_per_node": 2})
    lite_store.drop(ref.scope)
    report = ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    assert report.edges_written > 0
    edges = EdgeStore(lite_store).neighbours(ref.scope, ["docs/refunds/0"])
    assert [e.to_source for e in edges][:1] == ["card-refunds"] and all(e.similarity >= 0.6 for e in edges)
    assert "kittens" not in {e.to_source for e in edges}
    seeds = await _seed(lite_store, embedder, ref, "refunds paid card")
    out = await LinkExpand(_params(edges="inferred", cap=1), lite_store, embedder).apply(
        StageRequest("refunds paid card", 5), seeds, StageHandle(1))
    added = [h for h in out if h.provenance.via]
    assert [h.source_id for h in added] == ["card-refunds"]
    assert added[0].provenance.via.startswith(f"similar to {seeds[0].qualified_id} (0.")
    EdgeStore(lite_store).delete_sources(ref.scope, ["refunds"])
    assert EdgeStore(lite_store).neighbours(ref.scope, ["docs/refunds/0"]) == []


def test_a_reingest_keeps_unchanged_chunks_edges_and_prune_drops_the_sources(lite_store, embedder):
    ref = make_ref("links", collection="reinferred", graph={"infer_threshold": 0.6, "infer_per_node": 2},
                   chunking={"child_chars": 100, "child_overlap": 0, "parent_chars": 400})
    lite_store.drop(ref.scope)
    first = ("Refunds are paid back to the original card within ten business days of the request.\n\n"
             "Kittens sleep for most of the day and play at night in the garden.")
    ingest_documents(lite_store, embedder, ref, [Document("refunds", first), *DOCS[1:]], progress=False)
    edges = EdgeStore(lite_store)
    kept = edges.neighbours(ref.scope, ["docs/refunds/0"])
    assert "card-refunds" in {e.to_source for e in kept}
    changed = first.replace("play at night in the garden", "chase string all evening long")
    report = ingest_documents(lite_store, embedder, ref, [Document("refunds", changed), *DOCS[1:]], progress=False)
    assert report.chunks_written == 1  # only the second chunk changed
    assert edges.neighbours(ref.scope, ["docs/refunds/0"]) == kept
    ingest_documents(lite_store, embedder, ref, [Document("refunds", changed)], progress=False, prune=True)
    assert edges.neighbours(ref.scope, ["docs/card-refunds/0"]) == []


def test_links_must_be_a_list_of_source_ids(lite_store, embedder):
    ref = make_ref("links", collection="badlinks")
    for links, message in ((["ok", 3], "must be a list of source ids"), ("billing", "must be a list"),
                           (["x"] * 65, "at most 64"), (["a\x00b"], "non-printable")):
        with pytest.raises(InvalidInput, match=message):
            ingest_documents(lite_store, embedder, ref, [Document("d", "text", metadata={"links": links})],
                             progress=False)


def test_expand_is_a_registered_hit_stage_with_checked_parameters(lite_store, embedder, tmp_path):
    from gateway.retrieval.stages import StageServices, build_pipelines
    from gateway.storage.token_vectors import TokenVectorStore
    from gateway.tenancy.config import TenantConfig

    def tenant(params: dict) -> TenantConfig:
        return TenantConfig.model_validate({"id": "g", "namespaces": {"n": {"collections": {
            "c": {"trust_tier": "first-party"}}}}, "pipelines": {"graph": {"stages": [{"expand": params}]}}})

    services = StageServices(lite_store, embedder, TokenVectorStore(tmp_path), {})
    [stage] = build_pipelines(tenant({"seeds": 2, "weight": 0.3, "cap": 4}), services)["graph"].hit_stages
    assert isinstance(stage, LinkExpand) and stage.name == "expand"
    with pytest.raises(ValueError, match="unknown parameter 'hops' for 'expand'; allowed: cap, edges, on_error, "
                                         "seeds, weight"):
        tenant({"hops": 2})


async def test_a_neighbour_gets_the_trust_tier_of_its_own_record(lite_store, embedder):
    from gateway.retrieval.stages import record_tiers
    from gateway.tenancy.config import TenantConfig

    tenant = TenantConfig.model_validate({"id": "links", "namespaces": {"docs": {"collections": {"tiered": {
        "trust_tier": "partner", "trust_by": {"field": "origin", "tiers": {"forum": "user-generated"}}}}}}})
    ref = make_ref("links", collection="tiered", trust_tier="partner",
                   trust_by={"field": "origin", "tiers": {"forum": "user-generated"}})
    lite_store.drop(ref.scope)
    docs = [Document("refunds", DOCS[0].text, metadata={"links": ["billing"], "origin": "vendor"}),
            Document("billing", DOCS[1].text, metadata={"origin": "forum"})]
    ingest_documents(lite_store, embedder, ref, docs, progress=False)
    seeds = await _seed(lite_store, embedder, ref, "original card refund ten business days")
    assert seeds[0].provenance.trust_tier == "partner"
    out = await LinkExpand(_params(edges="links"), lite_store, embedder, record_tiers(tenant)).apply(
        StageRequest("when are refunds paid?", 5), seeds, StageHandle(1))
    assert [(h.source_id, h.provenance.trust_tier) for h in out if h.provenance.via] == [("billing", "user-generated")]
