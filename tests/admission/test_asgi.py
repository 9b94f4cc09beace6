"""Admission over the real app: 429 shape and Retry-After, per-tenant limits, cost ceiling, deadlines."""

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import KEYS, Gateway
from tests.serving import serve_limited, slow_routing

COLLECTIONS = "{ collections { name } }"
SEARCH = '{ search(input: {query: "refund policy", collection: "docs"}) { hits { chunk { sourceId } } } }'


@pytest.fixture(scope="module", name="limited")
def limited_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with serve_limited(tmp_path_factory.mktemp("admission")) as gateway:
        yield gateway


def test_over_the_rate_is_a_graphql_shaped_429_with_retry_after(limited: Gateway):
    # globex's requests below prove the limit is acme's alone; acme's burst of 2 is spent first.
    answers = [limited.post(COLLECTIONS, key="acme-reader") for _ in range(3)]
    assert [a.status_code for a in answers[:2]] == [200, 200]
    refused = answers[2]
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    body = refused.json()
    assert body["data"] is None
    error = body["errors"][0]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    assert "tenant 'acme' is over its rate of 0.01 requests/s (burst 2)" in error["message"]
    assert f"retry after {refused.headers['Retry-After']} s" in error["message"]
    # Another key of the same tenant shares the tenant's limit.
    assert limited.post(COLLECTIONS, key="acme-admin").status_code == 429
    # Another tenant is not limited by acme's traffic.
    assert limited.post(COLLECTIONS, key="globex-reader").status_code == 200


def test_a_request_over_the_cost_ceiling_names_its_cost_and_the_limit(limited: Gateway):
    aliases = " ".join(f'a{i}: search(input: {{query: "x", limit: 100}}) {{ hits {{ content }} }}' for i in range(15))
    answer = limited.post("{ " + aliases + " }", key="acme-reader")
    assert answer.status_code == 413
    error = answer.json()["errors"][0]
    assert error["extensions"]["code"] == "LIMIT_EXCEEDED"
    assert "request cost" in error["message"] and "ceiling of 5000 units per request" in error["message"]


def test_a_request_past_its_deadline_says_what_was_done(limited: Gateway, monkeypatch):
    slow_routing(monkeypatch)
    answer = limited.post(SEARCH, key="globex-reader")
    assert answer.status_code == 200
    error = answer.json()["errors"][0]
    assert error["extensions"]["code"] == "DEADLINE_EXCEEDED"
    assert "deadline of 1 ms exceeded" in error["message"] and "done: route" in error["message"]


def test_a_refused_request_does_not_reach_graphql_validation(limited: Gateway):
    # Refusal comes before execution: even a broken document is answered with RATE_LIMITED.
    for _ in range(3):
        if limited.post(COLLECTIONS, key="acme-reader").status_code == 429:
            break
    answer = httpx.post(f"{limited.url}/graphql", json={"query": "{ nope"},
                        headers={"Authorization": f"Bearer {KEYS['acme-reader']}"}, timeout=30)
    assert answer.status_code == 429 and answer.json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"


async def test_a_request_still_running_past_its_deadline_is_cut_off_with_504():
    import asyncio
    import json
    from types import SimpleNamespace

    from gateway.admission.asgi import RECORD_KEY, AdmissionApp, AdmissionRuntime
    from gateway.admission.gate import Admission
    from gateway.admission.workers import RequestWorkers
    from tests.admission.test_gate import limits

    cancelled = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def stuck(scope, receive, send):  # ignores every cooperative check
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            loop.call_soon_threadsafe(cancelled.set)
            raise

    runtime = AdmissionRuntime(Admission(lambda t: limits(deadline_s=0.05)), RequestWorkers(1),
                               lambda *a: SimpleNamespace(operation="query:search", name=None, cost=1))
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/graphql", "headers": [], "query_string": b"",
             "state": {"principal": SimpleNamespace(tenant="acme")}}
    try:
        await AdmissionApp(stuck, lambda: runtime)(scope, receive, send)
        await asyncio.wait_for(cancelled.wait(), 10)  # the stuck coroutine was cancelled on its worker
    finally:
        runtime.workers.shutdown()
    assert sent[0]["status"] == 504
    error = json.loads(sent[1]["body"])["errors"][0]
    assert error["extensions"]["code"] == "DEADLINE_EXCEEDED" and "deadline of 50 ms exceeded" in error["message"]
    assert scope[RECORD_KEY].deadline.cancelled
