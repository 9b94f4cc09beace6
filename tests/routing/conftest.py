"""A tenant with three collections in two namespaces, ingested into the module's milvus-lite store."""

import pytest

from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.routing.searcher import Searcher
from gateway.settings import Settings
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.registry import TenantRegistry

TENANT = {
    "id": "acme",
    "namespaces": {
        "support": {"collections": {"docs": {"trust_tier": "first-party"},
                                    "tickets": {"trust_tier": "user-generated"}}},
        "sales": {"collections": {"leads": {"trust_tier": "partner", "mode": "sparse"}}},
    },
    "router": {"rules": [{"keyword": {"routes": {"tickets": ["ticket"], "sales/leads": ["price", "discount"]}}},
                         {"metadata": {"key": "source"}}],
               "default": "federated"},
    "federation": {"merge": "rrf", "timeout_ms": 20000},
}
DOCS = {
    "docs": [Document("refunds", "Refunds reach the original card within five business days.", title="Refunds"),
             Document("shared", "Shared onboarding checklist for every team.", title="Checklist")],
    "tickets": [Document("T-1", "Customer asked for a refund to a closed card account.", title="Refund to closed card"),
                Document("shared", "Shared onboarding checklist for every team.", title="Checklist")],
    "leads": [Document("L-1", "Enterprise lead asking about price and volume discount for refunds.", title="Lead")],
}


@pytest.fixture(scope="module")
def searcher(lite_store, embedder):
    registry = TenantRegistry({"acme": TenantConfig.model_validate(TENANT)})
    for ref in registry.collections("acme"):
        lite_store.drop(ref.scope)
        ingest_documents(lite_store, embedder, ref, DOCS[ref.scope.collection], progress=False)
    return Searcher(registry, lite_store, embedder, Settings())


@pytest.fixture
def tenant_spec() -> dict:
    """The tenant above as a plain mapping, for tests that vary one setting."""
    return dict(TENANT)
