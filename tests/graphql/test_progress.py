"""searchProgress over HTTP: the first pass, then the final result, through the gateway's key check."""

import json

import httpx

from tests.conftest import KEYS

PROGRESS = """subscription($q: String!, $pipeline: String) {
  searchProgress(input: {query: $q, pipeline: $pipeline}) {
    phase
    hits { rank score chunk { id sourceId } }
    result { totalCount trace { stages { name } } }
  }
}"""
QUESTION = "How do I get a refund for a double charge?"


def events(gateway, variables, key="acme-reader", accept="text/event-stream") -> tuple[httpx.Response, list]:
    """The response and the payloads of its `next` events (Server-Sent Events)."""
    response = httpx.post(f"{gateway.url}/graphql", json={"query": PROGRESS, "variables": variables},
                          headers={"Authorization": f"Bearer {KEYS.get(key, key)}", "Accept": accept}, timeout=60)
    payloads = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if lines.get("event") == "next":
            payloads.append(json.loads(lines["data"]))
    return response, payloads


def test_a_pipeline_search_sends_its_first_pass_then_the_final_ranking(gateway):
    response, payloads = events(gateway, {"q": QUESTION, "pipeline": "evidence"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "private, no-store"
    assert [p["data"]["searchProgress"]["phase"] for p in payloads] == ["RETRIEVED", "FINAL"]
    first, final = (p["data"]["searchProgress"] for p in payloads)
    assert first["result"] is None and first["hits"]
    assert [h["rank"] for h in first["hits"]] == list(range(1, len(first["hits"]) + 1))
    stages = [s["name"] for s in final["result"]["trace"]["stages"]]
    assert any(name.startswith("rerank") for name in stages)  # the stages ran after the first part
    assert final["hits"] and final["result"]["totalCount"] == len(final["hits"])
    # The final part is what `search` answers for the same input.
    search = gateway.data('query($q: String!) { search(input: {query: $q, pipeline: "evidence"}) '
                          '{ hits { chunk { id } } } }', {"q": QUESTION})["search"]
    assert [h["chunk"]["id"] for h in final["hits"]] == [h["chunk"]["id"] for h in search["hits"]]


def test_a_search_without_a_pipeline_sends_only_the_final_part(gateway):
    _, payloads = events(gateway, {"q": "refund"})
    assert [p["data"]["searchProgress"]["phase"] for p in payloads] == ["FINAL"]


def test_multipart_subscriptions_are_served_too(gateway):
    response, _ = events(gateway, {"q": "refund"}, accept='multipart/mixed;subscriptionSpec="1.0",application/json')
    assert response.status_code == 200 and response.headers["content-type"].startswith("multipart/mixed")
    assert '"phase":"FINAL"' in response.text.replace(" ", "")


def test_a_bad_search_is_a_coded_error_and_another_tenant_sees_nothing(gateway):
    _, payloads = events(gateway, {"q": "refund", "pipeline": "evidence"}, key="globex-reader")
    [error] = payloads[-1]["errors"]
    assert error["extensions"]["code"] == "UNKNOWN_PIPELINE" and "'evidence'" in error["message"]
    response, payloads = events(gateway, {"q": QUESTION}, key="not-a-key")
    assert response.status_code == 401 and payloads == []


def test_a_subscription_without_a_streaming_accept_is_a_client_error(gateway):
    response = gateway.post(PROGRESS, {"q": "refund"})
    [error] = response.json()["errors"]
    assert response.status_code == 400 and error["extensions"]["code"] == "INVALID_INPUT"
    assert "Accept: text/event-stream" in error["message"]


def test_a_query_is_answered_in_one_part_whatever_streaming_types_the_client_accepts(gateway):
    # urql sends this Accept with every request: a query must still get one JSON answer.
    accept = ("application/graphql-response+json, application/graphql+json, application/json, "
              "text/event-stream, multipart/mixed")
    response = httpx.post(f"{gateway.url}/graphql", json={"query": '{ collections { name } }'},
                          headers={"Authorization": f"Bearer {KEYS['acme-reader']}", "Accept": accept}, timeout=60)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/graphql-response+json")
    assert response.json()["data"]["collections"]


def test_server_sent_events_end_lines_with_lf_as_urql_parses_them(gateway):
    # urql's fetchSubscriptions sends this Accept and splits the stream on "\n\n"; CRLF-separated
    # events never matched ("[Network] No Content").
    response = httpx.post(f"{gateway.url}/graphql", json={"query": PROGRESS, "variables": {"q": "refund"}},
                          headers={"Authorization": f"Bearer {KEYS['acme-reader']}",
                                   "Accept": "text/event-stream, multipart/mixed"}, timeout=60)
    assert response.headers["content-type"].startswith("text/event-stream") and "\r" not in response.text
    data = [line[len("data: "):] for block in response.text.split("\n\n") for line in block.split("\n")
            if line.startswith("data: ") and line != "data: "]
    assert [json.loads(d)["data"]["searchProgress"]["phase"] for d in data] == ["FINAL"]
