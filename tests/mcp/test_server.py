"""The MCP endpoint with the SDK's own client over HTTP: same keys, same tenants, query-only."""

import asyncio
import uuid

import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import KEYS


def run(gateway, key: str, action):
    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEYS.get(key, key)}"}, timeout=60) as http:
            async with streamable_http_client(f"{gateway.url}/mcp", http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    return await action(session)
    return asyncio.run(go())


def test_tools_are_query_only(gateway):
    tools = run(gateway, "acme-admin", lambda s: s.list_tools())
    assert {t.name for t in tools.tools} == {"search", "getSource", "validateCitations"}
    search = next(t for t in tools.tools if t.name == "search")
    assert search.input_schema["required"] == ["query"] and search.input_schema["additionalProperties"] is False


def test_search_returns_citable_hits_of_the_callers_tenant(gateway):
    async def action(session):
        return await session.call_tool("search", {"query": "How do refunds work?", "collection": "docs", "limit": 3})

    for tenant in ("acme", "globex"):
        result = run(gateway, f"{tenant}-reader", action)
        assert not result.is_error, result
        hits = result.structured_content["hits"]
        assert 1 <= len(hits) <= 3
        for hit in hits:
            assert hit["citation"] == f"[{hit['sourceId']}/{hit['chunkId']}]"
            assert hit["content"] and hit["score"] > 0 and hit["collection"] == "docs"
            assert hit["url"] == hit["sourceId"]  # the path relative to the folder ingested, not the server's
        text = result.content[0].text
        assert text.startswith("## Retrieved Context (How do refunds work?)")
        assert hits[0]["citation"] in text
        own = gateway.data('{ search(input: {query: "How do refunds work?", collection: "docs", limit: 3}) { hits { chunk { sourceId } } } }',
                           key=f"{tenant}-reader")["search"]["hits"]
        assert [h["sourceId"] for h in hits] == [h["chunk"]["sourceId"] for h in own]


def test_get_source_and_validate_citations_round_trip(gateway):
    async def action(session):
        found = await session.call_tool("search", {"query": "refund", "collection": "docs", "limit": 1})
        hit = found.structured_content["hits"][0]
        source = await session.call_tool("getSource", {"namespace": "support", "sourceId": hit["sourceId"]})
        words = " ".join(hit["content"].split()[:4])
        answer = f'Per the docs, "{words}" {hit["citation"]}. Also "made up words here" {hit["citation"]}.'
        checked = await session.call_tool("validateCitations", {
            "answer": answer, "evidence": [{k: hit[k] for k in ("sourceId", "chunkId", "content")}],
            "required": True})
        return hit, source, checked

    hit, source, checked = run(gateway, "acme-reader", action)
    assert source.structured_content["sourceId"] == hit["sourceId"]
    assert hit["chunkId"] in {c["chunkId"] for c in source.structured_content["chunks"]}
    assert [c["status"] for c in checked.structured_content["citations"]] == ["valid", "misquoted"]
    assert checked.structured_content["valid"] is False


def test_tool_mistakes_come_back_coded_in_the_result(gateway):
    async def action(session):
        return [await session.call_tool(name, args) for name, args in [
            ("search", {"query": "x", "collection": "nope"}),
            ("search", {"query": "x", "limit": 1000}),
            ("search", {"query": "x", "drop": True}),
            ("getSource", {"namespace": "support", "sourceId": "GLX-2001"}),
            ("upsertDocuments", {"documents": []}),
        ]]

    results = run(gateway, "acme-writer", action)
    codes = [r.structured_content["error"]["code"] for r in results]
    assert all(r.is_error for r in results)
    assert codes == ["UNKNOWN_COLLECTION", "INVALID_INPUT", "INVALID_INPUT", "UNKNOWN_SOURCE", "INVALID_INPUT"]
    assert "allowed: 1 to 100" in results[1].structured_content["error"]["message"]
    assert "tools: getSource, search, validateCitations" in results[4].structured_content["error"]["message"]


def test_no_key_is_401(gateway):
    response = httpx.post(f"{gateway.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                          headers={"Accept": "application/json, text/event-stream"})
    assert response.status_code == 401
    assert response.json()["error"]["data"]["code"] == "UNAUTHENTICATED"
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_no_answer_may_be_stored_by_a_cache_or_handed_to_another_key(gateway):
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    answered = httpx.post(f"{gateway.url}/mcp", json=listing,
                          headers={**accept, "Authorization": f"Bearer {KEYS['acme-reader']}"})
    refused = httpx.post(f"{gateway.url}/mcp", json=listing, headers=accept)
    assert answered.status_code == 200 and answered.json()["result"]["tools"]
    assert refused.status_code == 401
    for response in (answered, refused):
        assert response.headers["cache-control"] == "private, no-store"
        assert "Authorization" in response.headers["vary"]


def test_a_tenant_with_tool_prefixes_gets_one_pair_per_collection(gateway):
    async def action(session):
        tools = await session.list_tools()
        found = await session.call_tool("ticketsSearch", {"query": "my shipment is late", "limit": 2})
        hit = found.structured_content["hits"][0]
        source = await session.call_tool("ticketsGetSource", {"sourceId": hit["sourceId"]})
        bound = await session.call_tool("docsSearch", {"query": "x", "collection": "tickets"})
        return tools, found, source, bound

    tools, found, source, bound = run(gateway, "globex-reader", action)
    assert [t.name for t in tools.tools] == ["search", "getSource", "validateCitations", "docsSearch",
                                             "docsGetSource", "ticketsSearch", "ticketsGetSource"]
    assert not any(word in t.name.lower() for t in tools.tools for word in ("upsert", "delete", "write"))
    docs = next(t for t in tools.tools if t.name == "docsSearch")
    # GraphQL's SearchInput fields, less those that choose collections (the pair is bound to one).
    assert set(docs.input_schema["properties"]) == {"query", "limit", "mode", "fusion", "alpha", "threshold",
                                                    "pipeline", "filter", "conversationId", "autocut", "groupBy",
                                                    "hitsPerGroup", "image", "vector", "sort", "facets",
                                                    "facetDepth", "highlights"}
    assert "support/docs" in docs.description
    assert {h["collection"] for h in found.structured_content["hits"]} == {"tickets"}
    assert source.structured_content["collection"] == "tickets"
    # The pair is bound to its collection: it takes no collection argument.
    assert bound.is_error and "unknown argument(s) 'collection'" in bound.structured_content["error"]["message"]


def test_another_tenants_collection_tools_do_not_exist(gateway):
    async def action(session):
        return await session.list_tools(), await session.call_tool("docsSearch", {"query": "refund"})

    tools, result = run(gateway, "acme-reader", action)
    assert "docsSearch" not in {t.name for t in tools.tools}
    assert result.is_error and result.structured_content["error"]["message"] == (
        "tool 'docsSearch' does not exist; tools: getSource, search, validateCitations")


def test_search_with_a_conversation_id_records_turns_and_resolves_follow_ups(gateway):
    cid = f"mcp-{uuid.uuid4().hex[:10]}"

    async def action(session):
        first = await session.call_tool("search", {"query": "How do refunds work?", "collection": "docs",
                                                   "limit": 3, "conversationId": cid})
        follow = await session.call_tool("search", {"query": "how long does it take?", "collection": "docs",
                                                    "limit": 3, "conversationId": cid})
        bad = await session.call_tool("search", {"query": "x", "collection": "docs", "conversationId": "no spaces"})
        return first, follow, bad

    first, follow, bad = run(gateway, "acme-reader", action)
    assert not first.is_error and not follow.is_error
    turns = gateway.data('query($id: String!) { conversation(id: $id) { turns { turn query resolvedQuery resolvedFrom hitIds } } }',
                         {"id": cid}, key="acme-reader")["conversation"]["turns"]
    assert [t["query"] for t in turns] == ["How do refunds work?", "how long does it take?"]
    assert turns[1]["resolvedFrom"] == 1
    assert turns[1]["resolvedQuery"] == "How do refunds work? how long does it take?"
    assert turns[1]["hitIds"] == [f"support/docs/{h['sourceId']}/{h['chunkId']}"
                                  for h in follow.structured_content["hits"]]
    # The same id is another conversation for another tenant: nothing of acme's is visible there.
    assert gateway.data('query($id: String!) { conversation(id: $id) { turns { turn } } }', {"id": cid},
                        key="globex-reader")["conversation"]["turns"] == []
    assert bad.is_error and bad.structured_content["error"]["code"] == "INVALID_INPUT"
    assert "'no spaces'" in bad.structured_content["error"]["message"]


def test_a_graphql_filter_and_mode_work_as_written_in_graphql(gateway):
    """The filter is GraphQL's FilterInput as JSON: its enum spellings (GTE, IN, SPARSE) are accepted too."""
    def search(mode, op):
        async def action(session):
            return await session.call_tool("search", {
                "query": "refund", "collection": "docs", "limit": 5, "mode": mode,
                "filter": {"not": {"field": "source_id", "op": op, "value": ["no-such-source"]}}})
        result = run(gateway, "acme-reader", action)
        assert not result.is_error, result
        return [(h["sourceId"], h["chunkId"]) for h in result.structured_content["hits"]]

    tool_spelling, graphql_spelling = search("sparse", "in"), search("SPARSE", "IN")
    assert tool_spelling and tool_spelling == graphql_spelling


def test_a_models_tool_arguments_are_valid_graphql_variables(gateway):
    """docs/agents.md: run a model's search call through GraphQL by passing its arguments as `$input`."""
    [search] = [t["function"] for t in gateway.data("{ toolDefinitions }")["toolDefinitions"]
                if t["function"]["name"] == "search"]
    schema = search["parameters"]["properties"]
    arguments = {"query": "refund", "collection": "docs", "limit": 3, "mode": schema["mode"]["enum"][-1],
                 "fusion": schema["fusion"]["enum"][0], "groupBy": schema["groupBy"]["enum"][0],
                 "filter": {"field": "created_at", "op": "GTE", "value": 0}}
    response = gateway.post("query($input: SearchInput!) { search(input: $input) { groups { sourceId } } }",
                            {"input": arguments})
    body = response.json()
    assert "errors" not in body, body
    assert body["data"]["search"]["groups"]

    async def action(session):
        return await session.call_tool("search", arguments)

    result = run(gateway, "acme-reader", action)
    assert not result.is_error, result
    assert {g["sourceId"] for g in result.structured_content["groups"]} == {
        g["sourceId"] for g in body["data"]["search"]["groups"]}


def test_a_tool_result_carries_the_trace_id_of_its_call(gateway):
    async def action(session):
        return await session.call_tool("search", {"query": "refund", "collection": "docs", "limit": 1})

    result = run(gateway, "acme-reader", action)
    trace_id = result.structured_content["traceId"]
    assert len(trace_id) == 32 and int(trace_id, 16) != 0
    spans = [s for s in gateway.spans.get_finished_spans() if format(s.context.trace_id, "032x") == trace_id]
    assert "mcp.tool" in {s.name for s in spans}


def test_the_search_tool_sorts_facets_and_highlights_as_graphql_does(gateway):
    arguments = {"query": "refund invoice", "collection": "tickets", "limit": 6,
                 "sort": [{"field": "metadata.year", "order": "desc"}],
                 "facets": [{"field": "metadata.status"}, {"field": "created_at", "dateInterval": "year"}],
                 "facetDepth": 50, "highlights": True}

    async def action(session):
        return await session.call_tool("search", arguments)

    result = run(gateway, "acme-reader", action)
    assert not result.is_error, result
    payload = result.structured_content
    body = gateway.data("""query($input: SearchInput!) { search(input: $input) {
        hits { content chunk { sourceId chunkId } highlights { spans { start end text term } } }
        facets { depth counted complete fields { field other missing buckets { label count value start end } } } } }""",
                        {"input": {**arguments, "sort": [{"field": "metadata.year", "order": "DESC"}],
                                   "facets": [{"field": "metadata.status"},
                                              {"field": "created_at", "dateInterval": "YEAR"}]}})["search"]
    assert [(h["sourceId"], h["chunkId"]) for h in payload["hits"]] == [
        (h["chunk"]["sourceId"], h["chunk"]["chunkId"]) for h in body["hits"]]
    assert payload["facets"] == body["facets"] and payload["facets"]["depth"] == 50
    assert [h["highlights"]["spans"] for h in payload["hits"]] == [h["highlights"]["spans"] for h in body["hits"]]
    assert any(h["highlights"]["spans"] for h in payload["hits"])

    async def plain(session):
        return await session.call_tool("search", {"query": "refund", "collection": "tickets", "limit": 2})

    assert "highlights" not in run(gateway, "acme-reader", plain).structured_content["hits"][0]


def test_bad_sort_and_facet_arguments_are_coded_errors(gateway):
    async def action(session):
        return [await session.call_tool("search", {"query": "refund", "collection": "tickets", **extra}) for extra in (
            {"sort": [{"field": "score"}]}, {"facets": [{"field": "metadata.owner"}]},
            {"facets": [{"field": "source_id", "size": 500}]}, {"sort": [{"field": "title", "order": "UP"}]})]

    messages = [r.structured_content["error"] for r in run(gateway, "acme-reader", action)]
    assert all(m["code"] == "INVALID_INPUT" for m in messages)
    assert "sort field 'score' is unknown" in messages[0]["message"]
    assert "facet field 'metadata.owner' is not filterable" in messages[1]["message"]
    assert "'size' is 500; allowed: 1 to 100" in messages[2]["message"]
    assert "'order' is 'UP'; allowed: ASC, DESC" in messages[3]["message"]
