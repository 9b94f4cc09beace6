"""Lifecycle events of real searches, heard by Python subscribers named in tenant config."""

import asyncio

import pytest

from gateway.errors import UnknownCollection
from gateway.routing.searcher import Searcher, SearchRequest
from gateway.settings import Settings
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry
from tests.hooks.subscribers import SEEN

FAQ = "tests.retrieval.faq_retriever:lookup"
SUBSCRIBERS = "tests.hooks.subscribers"


def tenant(tenant_id: str, **hooks) -> TenantConfig:
    return TenantConfig.model_validate({
        "id": tenant_id,
        "namespaces": {"help": {"collections": {"faq": {"trust_tier": "partner", "retriever": FAQ},
                                                "more": {"trust_tier": "partner", "retriever": FAQ}}}},
        "pipelines": {"top": {"stages": [{"diversify": {"limit": 1}}]}},
        "hooks": hooks})


@pytest.fixture
def searcher(lite_store, embedder):
    SEEN.clear()
    registry = TenantRegistry({
        "acme": tenant("acme", subscribers=[f"{SUBSCRIBERS}:record_acme", f"{SUBSCRIBERS}:explode"]),
        "globex": tenant("globex", subscribers=[f"{SUBSCRIBERS}:record_globex"], includeQuery=True),
        "initech": tenant("initech")})
    searcher = Searcher(registry, lite_store, embedder, Settings())
    yield searcher
    searcher.close()


def run(searcher, tenant_id, **request):
    return asyncio.run(searcher.search(Principal(tenant_id, Role.READER), SearchRequest(**request)))


def heard(searcher, tenant_id):
    assert searcher.hooks.tenant(tenant_id).flush(10)
    return SEEN[tenant_id]


def test_a_search_is_start_stages_end_with_counts_and_no_query_text(searcher):
    result = run(searcher, "acme", query="reset my password", collection="faq", pipeline="top")
    events = heard(searcher, "acme")
    names = [(e["event"], e.get("stage", {}).get("name")) for e in events]
    assert names == [("retrieval:start", None),
                     ("stage:start", "route"), ("stage:end", "route"),
                     ("stage:start", "retrieve:help/faq"), ("stage:end", "retrieve:help/faq"),
                     ("stage:start", "diversify"), ("stage:end", "diversify"),
                     ("retrieval:end", None)]
    assert len({e["retrievalId"] for e in events}) == 1 and len({e["eventId"] for e in events}) == len(events)
    assert {e["tenant"] for e in events} == {"acme"}
    end = events[-1]
    assert (end["namespace"], end["collections"], end["retriever"], end["mode"]) == (
        "help", ["help/faq"], f"custom:{FAQ}", "hybrid")
    assert end["counts"] == {"hits": len(result.hits), "stages": 3, "failedCollections": 0}
    assert end["durationMs"] >= 0
    retrieve = events[4]
    assert retrieve["counts"]["output"] >= 1 and retrieve["stage"]["status"] == "ok"
    # Never the query text (nor previews): the tenant did not opt in.
    assert all("query" not in e and "reset" not in str(e) for e in events)


def test_a_failed_search_ends_with_its_error_code(searcher):
    with pytest.raises(UnknownCollection):
        run(searcher, "acme", query="reset", collection="nowhere")
    events = heard(searcher, "acme")
    assert [e["event"] for e in events] == ["retrieval:start", "stage:start", "stage:end", "retrieval:failed"]
    assert events[2]["stage"]["status"] == "failed"
    assert (events[-1]["errorCode"], events[-1]["collections"]) == ("UNKNOWN_COLLECTION", ["nowhere"])


def test_federated_events_and_the_query_only_for_a_tenant_that_opts_in(searcher):
    run(searcher, "globex", query="export data", federated=True)
    events = heard(searcher, "globex")
    assert events[0]["query"] == "export data" and events[-1]["query"] == "export data"
    assert all("query" not in e for e in events if e["event"].startswith("stage:"))
    end = events[-1]
    assert (end["retriever"], end["namespace"], sorted(end["collections"])) == (
        "federated", "help", ["help/faq", "help/more"])
    assert "stage:start" in [e["event"] for e in events if e.get("stage", {}).get("name") == "federate"]


def test_one_tenants_hooks_never_hear_another_tenants_searches(searcher):
    run(searcher, "acme", query="reset password", collection="faq")
    run(searcher, "initech", query="reset password", collection="faq")  # no hooks: nothing is built or sent
    assert heard(searcher, "globex") == []
    assert {e["tenant"] for e in heard(searcher, "acme")} == {"acme"}
    assert searcher.hooks.tenant("initech") is None
    # The failing subscriber is counted, and the one before it still heard everything.
    assert searcher.hooks.tenant("acme").sinks["subscribers"].stats.failed == len(SEEN["acme"])
