"""Tool definitions and strict argument checks, before anything reaches the searcher."""

import asyncio

import pytest

from gateway.errors import GatewayError, InvalidInput, LimitExceeded
from gateway.mcp.tools import Tools, definitions
from gateway.retrieval.options import Fusion, Mode
from gateway.storage.filters import Condition, Op
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


def test_definitions_list_the_graphql_spellings_of_every_enum():
    """A model copies these values: they must be what GraphQL's SearchInput takes (Mode.HYBRID: HYBRID)."""
    properties = definitions(100)[0].parameters["properties"]
    assert properties["mode"]["enum"] == [m.name for m in Mode] == ["DENSE", "SPARSE", "HYBRID"]
    assert properties["fusion"]["enum"] == [f.name for f in Fusion]
    assert properties["groupBy"]["enum"] == ["SOURCE"]
    assert "op is one of EQ, NE, GT, GTE, LT, LTE, IN, NIN" in properties["filter"]["description"]


@pytest.mark.parametrize("name, args, message", [
    ("search", {}, "missing required argument\\(s\\) 'query'"),
    ("search", {"query": "x", "who": 1}, "unknown argument\\(s\\) 'who'; allowed: alpha, autocut, collection, collections"),
    ("search", {"query": 5}, "argument 'query' must be a string, got int"),
    ("search", {"query": "x", "limit": True}, "argument 'limit' must be a integer, got bool"),
    ("search", {"query": "x", "limit": 0}, "argument 'limit' is 0; allowed: 1 to 100"),
    ("search", {"query": "x", "mode": "fuzzy"}, "argument 'mode' is 'fuzzy'; allowed: DENSE, HYBRID, SPARSE"),
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
    text, payload = call("validateCitations", {"answer": "Refunds go back to the original card [s/0].", "evidence": [
        {"sourceId": "s", "chunkId": "0", "content": "Refunds go back to the original card within five days."}]})
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


class _Recording:
    """Stands in for the searcher to show the request a tool call builds (no store involved)."""

    def __init__(self):
        self.requests = []

    async def search(self, principal, request):
        self.requests.append(request)
        raise InvalidInput("stop here")


def _request(args):
    searcher = _Recording()
    with pytest.raises(InvalidInput, match="stop here"):
        asyncio.run(Tools(searcher, max_limit=100).call(READER, "search", args))
    return searcher.requests[0]


def test_graphql_enum_spellings_are_accepted_for_every_enumerated_argument():
    def args(mode, fusion, group_by, ops):
        return {"query": "x", "mode": mode, "fusion": fusion, "groupBy": group_by, "filter": {"and": [
            {"field": "metadata.year", "op": ops[0], "value": 2020},
            {"or": [{"field": "title", "op": ops[1], "value": ["a", "b"]},
                    {"not": {"field": "source_id", "op": ops[2], "value": "s"}}]}]}}

    tool_spelling = _request(args("hybrid", "rrf", "source", ["gte", "in", "ne"]))
    graphql_spelling = _request(args("HYBRID", "RRF", "SOURCE", ["GTE", "IN", "NE"]))
    assert tool_spelling == graphql_spelling
    assert (tool_spelling.mode, tool_spelling.fusion) == (Mode.HYBRID, Fusion.RRF)
    assert tool_spelling.filter.children[0] == Condition("metadata.year", Op.GTE, 2020)


@pytest.mark.parametrize("op", [o.value for o in Op] + [o.name for o in Op])
def test_every_filter_operator_is_accepted_in_both_spellings(op):
    value = ["a"] if op.lower() in ("in", "nin") else "a"
    assert _request({"query": "x", "filter": {"field": "title", "op": op, "value": value}}).filter.op is Op(op.lower())


@pytest.mark.parametrize("args, message", [
    ({"query": "x", "mode": "Hybrid"}, "argument 'mode' is 'Hybrid'; allowed: DENSE, HYBRID, SPARSE"),
    ({"query": "x", "filter": {"field": "title", "op": "Gte", "value": 1}}, "filter operator 'Gte' is unknown"),
])
def test_other_spellings_are_still_refused_naming_what_is_allowed(args, message):
    with pytest.raises(GatewayError, match=message):
        call("search", args)


def test_validate_citations_checks_support_unless_told_not_to():
    evidence = [{"sourceId": "refunds.md", "chunkId": "0",
                 "content": "Refunds are always returned to the original payment method."}]
    answer = "Refunds go back to the original payment method [refunds.md/0]. Webhooks retry 8 times [refunds.md/0]."
    text, payload = call("validateCitations", {"answer": answer, "evidence": evidence})
    verdicts = [c["support"]["verdict"] for c in payload["citations"]]
    assert verdicts == ["supported", "unsupported"] and payload["unchecked"] == 0
    assert payload["valid"] is False
    assert text == "0 citation(s) not valid, 1 unsupported by their chunk, 0 sentence(s) without a citation"
    _, payload = call("validateCitations", {"answer": answer, "evidence": evidence, "support": False})
    assert [c["support"] for c in payload["citations"]] == [None, None] and payload["valid"] is True


def test_the_search_tool_takes_a_query_vector_beside_the_query():
    request = _request({"query": "flux valve", "vector": [0.5, 0, 1]})
    assert (request.query, request.vector.dtype.name, request.vector.tolist()) == ("flux valve", "float32",
                                                                                   [0.5, 0.0, 1.0])
    schema = definitions(100)[0].parameters["properties"]["vector"]
    assert (schema["type"], schema["items"]) == ("array", {"type": "number"})
    with pytest.raises(InvalidInput, match=r"argument 'vector'\[1\] must be a number, got str"):
        call("search", {"query": "x", "vector": [1.0, "2"]})
    with pytest.raises(InvalidInput, match="query vector is all zeros"):
        call("search", {"query": "x", "vector": [0, 0]})
