"""Tool definitions and strict argument checks, before anything reaches the searcher."""

import asyncio

import pytest

from gateway.errors import InvalidInput, LimitExceeded
from gateway.mcp.tools import Tools, definitions
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role


class _NoSearcher:
    """Argument checks must refuse before any search: reaching the searcher fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"searcher.{name} reached with bad arguments")


TOOLS = Tools(_NoSearcher(), max_limit=100)
READER = Principal("acme", Role.READER)


def call(name, args):
    return asyncio.run(TOOLS.call(READER, name, args))


def test_openai_definitions_mirror_the_mcp_ones():
    shapes = [d.openai() for d in definitions(100)]
    assert [s["function"]["name"] for s in shapes] == ["search", "getSource", "validateCitations"]
    assert all(s["type"] == "function" and s["function"]["parameters"]["type"] == "object" for s in shapes)
    limit = shapes[0]["function"]["parameters"]["properties"]["limit"]
    assert (limit["type"], limit["minimum"], limit["maximum"]) == ("integer", 1, 100)


@pytest.mark.parametrize("name, args, message", [
    ("search", {}, "missing required argument\\(s\\) 'query'"),
    ("search", {"query": "x", "who": 1}, "unknown argument\\(s\\) 'who'; allowed: alpha, autocut, collection, collections"),
    ("search", {"query": 5}, "argument 'query' must be a string, got int"),
    ("search", {"query": "x", "limit": True}, "argument 'limit' must be a integer, got bool"),
    ("search", {"query": "x", "limit": 0}, "argument 'limit' is 0; allowed: 1 to 100"),
    ("search", {"query": "x", "mode": "fuzzy"}, "argument 'mode' is 'fuzzy'; allowed: dense, hybrid, sparse"),
    ("search", {"query": "x", "collections": ["a", 1]}, "argument 'collections'\\[1\\] must be a string"),
    ("search", {"query": "\ud800"}, "lone UTF-16 surrogate"),
    ("getSource", {"namespace": "support"}, "missing required argument\\(s\\) 'sourceId'"),
    ("validateCitations", {"answer": "a", "evidence": [{"sourceId": "s", "chunkId": "0"}]},
     "missing required argument\\(s\\) 'content'"),
    ("deleteSource", {}, "tool 'deleteSource' does not exist; tools: getSource, search, validateCitations"),
])
def test_bad_arguments_are_refused_with_what_is_allowed(name, args, message):
    with pytest.raises(InvalidInput, match=message):
        call(name, args)


def test_deeply_nested_arguments_are_refused():
    deep: object = "x"
    for _ in range(40):
        deep = {"not": deep}
    with pytest.raises(LimitExceeded, match="nested more than 32 levels"):
        call("search", {"query": "x", "filter": deep})


def test_validate_citations_needs_no_searcher():
    text, payload = call("validateCitations", {"answer": "It is so [s/0].",
                                               "evidence": [{"sourceId": "s", "chunkId": "0", "content": "so"}]})
    assert payload["valid"] is True and text == "all citations are valid"


def test_collection_pairs_are_per_tenant_and_bound_to_their_collection():
    from gateway.tenancy.config import TenantConfig
    from gateway.tenancy.registry import TenantRegistry

    class Recording:
        """Stands in for the searcher to show the request a pair builds (no store involved)."""

        def __init__(self):
            self.requests = []

        async def search(self, principal, request):
            self.requests.append(request)
            raise InvalidInput("stop here")

    tenant = TenantConfig.model_validate({"id": "acme", "namespaces": {"help": {"collections": {
        "docs": {"trust_tier": "first-party", "tool_prefix": "docs"},
        "faq": {"trust_tier": "partner", "tool_prefix": "faq", "retriever": "tests.retrieval.faq_retriever:lookup"},
        "plain": {"trust_tier": "partner"}}}}})
    searcher = Recording()
    tools = Tools(searcher, max_limit=100, registry=TenantRegistry({"acme": tenant}))
    assert [d.name for d in tools.definitions_for("acme")][3:] == ["docsSearch", "docsGetSource", "faqSearch"]
    assert [d.name for d in tools.definitions_for("globex")] == ["search", "getSource", "validateCitations"]
    assert (tools.base_name("acme", "docsGetSource"), tools.base_name("acme", "faqGetSource")) == ("getSource", None)
    with pytest.raises(InvalidInput, match="stop here"):
        asyncio.run(tools.call(READER, "faqSearch", {"query": "reset", "limit": 2}))
    request = searcher.requests[0]
    assert (request.namespace, request.collection, request.limit) == ("help", "faq", 2)
