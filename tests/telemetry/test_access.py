"""The access log: one JSON line per request without query text; a client that leaves cancels its work."""

import asyncio
import json
import logging
import time

import pytest

from gateway.admission.asgi import RECORD_KEY
from gateway.admission.deadline import Deadline
from gateway.telemetry.access import AccessLog
from gateway.telemetry.metrics import GatewayMetrics
from tests.conftest import Gateway

SECRET_QUERY = "zebra-confidential-merger-plan refund"


def access_lines(caplog) -> list[str]:
    """The access-log lines so far; the line is written just after the answer is sent, so wait for it."""
    for _ in range(500):
        lines = [r.getMessage() for r in caplog.records if r.name == "gateway.access"]
        if lines:
            return lines
        time.sleep(0.01)
    return []


def test_one_access_line_per_request_with_tenant_operation_code_latency_and_cost(gateway: Gateway, caplog):
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        body = gateway.post('query Lookup($q: String!) { search(input: {query: $q, collection: "docs"}) { hits { content } } }',
                            {"q": SECRET_QUERY}).json()
        assert "errors" not in body
        lines = [json.loads(line) for line in access_lines(caplog)]
    assert len(lines) == 1
    line = lines[0]
    assert line["tenant"] == "acme" and line["operation"] == "query:search" and line["operation_name"] == "Lookup"
    assert line["code"] == "OK" and line["status"] == 200 and line["cost"] > 1 and line["latency_ms"] > 0
    assert SECRET_QUERY.split()[0] not in json.dumps(line)


def test_access_line_says_when_which_worker_and_which_trace(gateway: Gateway, caplog):
    from datetime import datetime, timedelta, timezone

    with caplog.at_level(logging.INFO, logger="gateway.access"):
        body = gateway.post('{ search(input: {query: "refunds", collection: "docs"}) { trace { traceId } } }').json()
        line = json.loads(access_lines(caplog)[-1])
    assert line["trace_id"] == body["data"]["search"]["trace"]["traceId"] and len(line["trace_id"]) == 32
    assert line["worker"] == "0"  # a single-process gateway; `serve --workers N` gives each its index
    assert line["time"].endswith("Z")
    logged = datetime.fromisoformat(line["time"].replace("Z", "+00:00"))
    assert abs(datetime.now(timezone.utc) - logged) < timedelta(seconds=30)


async def _handled(middleware: AccessLog, path: str) -> None:
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    await middleware({"type": "http", "path": path, "method": "GET", "headers": []}, receive, send)


async def _answer(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def test_probes_and_scrapes_are_not_logged_unless_asked(caplog):
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        quiet = AccessLog(_answer, GatewayMetrics(), worker="1")
        for path in ("/healthz", "/readyz", "/metrics", "/mcp"):
            await _handled(quiet, path)
        assert [json.loads(r.getMessage())["path"] for r in caplog.records if r.name == "gateway.access"] == ["/mcp"]
        caplog.clear()
        loud = AccessLog(_answer, GatewayMetrics(), worker="1", log_probes=True)
        for path in ("/healthz", "/readyz", "/metrics"):
            await _handled(loud, path)
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]
    assert [line["path"] for line in lines] == ["/healthz", "/readyz", "/metrics"]
    assert {line["worker"] for line in lines} == {"1"}


def test_access_line_carries_the_error_code(gateway: Gateway, caplog):
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        gateway.post('{ search(input: {query: "zebra-confidential", collection: "nope"}) { hits { content } } }')
        message = access_lines(caplog)[-1]
    line = json.loads(message)
    assert line["code"] == "UNKNOWN_COLLECTION" and line["tenant"] == "acme"
    assert "zebra" not in message


async def test_a_client_that_disconnects_cancels_its_request():
    deadline = Deadline(60)
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow_app(scope, receive, send):
        scope[RECORD_KEY].deadline = deadline
        await receive()  # the whole body
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    messages = asyncio.Queue()
    await messages.put({"type": "http.request", "body": b"{}", "more_body": False})

    async def receive():
        return await messages.get()

    async def send(message):
        raise AssertionError("nothing is sent to a client that left")

    scope = {"type": "http", "path": "/graphql", "method": "POST", "headers": []}
    middleware = AccessLog(slow_app, GatewayMetrics())
    handled = asyncio.ensure_future(middleware(scope, receive, send))
    await asyncio.wait_for(started.wait(), 10)
    await messages.put({"type": "http.disconnect"})
    await asyncio.wait_for(handled, 10)
    assert cancelled.is_set() and deadline.cancelled
    assert scope[RECORD_KEY].code == "CLIENT_DISCONNECTED"


@pytest.mark.parametrize("body, status, code", [
    (b'{"data": null, "errors": [{"message": "m", "extensions": {"code": "RATE_LIMITED"}}]}', 429, "RATE_LIMITED"),
    (b'{"data": {"search": {"hits": []}}}', 200, "OK"),
    (b"not json", 401, "UNAUTHENTICATED"),
])
async def test_code_comes_from_the_graphql_errors_or_the_status(body, status, code):
    records = []

    async def app(scope, receive, send):
        records.append(scope[RECORD_KEY])
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    sent = []

    async def send(message):
        sent.append(message)

    metrics = GatewayMetrics()
    await AccessLog(app, metrics)({"type": "http", "path": "/graphql", "method": "POST", "headers": []}, receive, send)
    assert f'code="{code}"' in metrics.render().decode()
