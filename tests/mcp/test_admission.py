"""MCP tool calls share their tenant's admission with GraphQL: rate, cost ceiling, deadline."""

from collections.abc import Iterator

import pytest

from tests.conftest import Gateway
from tests.mcp.test_server import run
from tests.serving import serve_limited, slow_routing


@pytest.fixture(scope="module", name="limited")
def limited_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with serve_limited(tmp_path_factory.mktemp("mcp-admission")) as gateway:
        yield gateway


def test_tool_calls_are_admitted_per_tenant(limited: Gateway):
    async def three(session):
        return [await session.call_tool("getSource", {"namespace": "support", "sourceId": "x"}) for _ in range(3)]

    first, second, third = run(limited, "acme-reader", three)
    assert [r.structured_content["error"]["code"] for r in (first, second)] == ["UNKNOWN_SOURCE"] * 2
    assert third.is_error and third.structured_content["error"]["code"] == "RATE_LIMITED"
    assert "over its rate of 0.01 requests/s" in third.structured_content["error"]["message"]
    assert "retry after" in third.structured_content["error"]["message"]

    async def one(session):
        return await session.call_tool("getSource", {"namespace": "support", "sourceId": "x"})

    assert run(limited, "globex-reader", one).structured_content["error"]["code"] in {"UNKNOWN_SOURCE",
                                                                                      "DEADLINE_EXCEEDED"}


def test_a_tool_call_over_the_cost_ceiling_is_refused_before_it_runs(limited: Gateway):
    async def big(session):
        return await session.call_tool("search", {"query": "x", "federated": True, "limit": 100,
                                                  "pipeline": "evidence",
                                                  "filter": {"field": "source_id", "op": "in",
                                                             "value": [str(i) for i in range(1000)]}})

    result = run(limited, "acme-admin", big)
    error = result.structured_content["error"]
    # The ceiling is checked before the rate, so the spent bucket of the test above does not matter.
    assert error["code"] == "LIMIT_EXCEEDED" and "ceiling of 5000 units per request" in error["message"]


def test_a_tool_call_past_its_deadline_says_what_was_done(limited: Gateway, monkeypatch):
    slow_routing(monkeypatch)
    async def search(session):
        return await session.call_tool("search", {"query": "refund policy", "collection": "docs"})

    error = run(limited, "globex-reader", search).structured_content["error"]
    assert error["code"] == "DEADLINE_EXCEEDED" and "deadline" in error["message"]
