"""The chat client against a real loopback HTTP server: success, timeout, malformed answers."""

import time

import pytest

from gateway.errors import UpstreamUnavailable
from gateway.retrieval.llm import ChatClient
from tests.loopback import loopback_server


def completion(content: str) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


async def test_json_answer_is_parsed_and_request_is_openai_shaped():
    with loopback_server(lambda path, body: (200, completion('```json\n{"queries": ["a"]}\n```'))) as (url, seen):
        client = ChatClient(url, "small-model", api_key="sk-test")
        assert await client.complete_json("system text", "user text") == {"queries": ["a"]}
    request = seen[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-test"
    assert request["body"]["model"] == "small-model"
    assert [m["role"] for m in request["body"]["messages"]] == ["system", "user"]


async def test_timeout_is_an_upstream_error_naming_the_limit():
    def slow(path, body):
        time.sleep(0.5)
        return 200, completion("{}")

    with loopback_server(slow) as (url, _):
        with pytest.raises(UpstreamUnavailable, match=r"did not answer within 0.1 s"):
            await ChatClient(url, "m", timeout_s=0.1).complete_json("s", "u")


@pytest.mark.parametrize(("status", "payload", "message"), [
    (200, completion("not json at all"), "malformed JSON"),
    (200, completion('["a list"]'), "JSON list, not an object"),
    (200, {"unexpected": True}, "without choices"),
    (200, "}{", "without choices"),
    (503, {"error": "overloaded"}, "HTTP 503"),
])
async def test_bad_answers_are_upstream_errors(status, payload, message):
    with loopback_server(lambda path, body: (status, payload)) as (url, _):
        with pytest.raises(UpstreamUnavailable, match=message):
            await ChatClient(url, "m").complete_json("s", "u")


async def test_unreachable_endpoint_is_an_upstream_error():
    with pytest.raises(UpstreamUnavailable, match="unreachable"):
        await ChatClient("http://127.0.0.1:9/v1", "m", timeout_s=2).complete("s", "u")
