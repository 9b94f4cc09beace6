"""One structured access-log line per request, request metrics, and cancel-on-disconnect.

The line is JSON on the `gateway.access` logger: when the request ended (ISO-8601, UTC), the
worker process that served it (its index under `serve --workers N`, else "0"), the request's trace
id (a GraphQL request's, which OTLP export and `trace { traceId }` also show), method, path, status,
tenant, operation (the bounded label and the client's operationName), result code, latency and
estimated cost. It never carries query text, variables or hits. Probes and scrapes (/healthz,
/readyz, /metrics) get no line unless `log_probes` (GATEWAY_LOG_PROBES) asks for them.

A GraphQL request whose client disconnects before the answer is sent is cancelled: its
deadline is marked cancelled (work in threads stops at its next check) and its task is
cancelled (queued blocking work is dropped).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime, timezone
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.admission.asgi import RECORD_KEY, RequestRecord
from gateway.telemetry.metrics import GatewayMetrics

log = logging.getLogger("gateway.access")
DISCONNECTED = "CLIENT_DISCONNECTED"
# Called every few seconds by orchestrators and Prometheus: their lines would bury the requests.
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
STATUS_CODES = {401: "UNAUTHENTICATED", 403: "FORBIDDEN", 404: "NOT_FOUND", 413: "LIMIT_EXCEEDED",
                429: "RATE_LIMITED", 504: "DEADLINE_EXCEEDED"}


class AccessLog:
    """Outermost middleware; `graphql_path` requests are also counted and watched for disconnects."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics, graphql_path: str = "/graphql", *,
                 worker: str = "0", log_probes: bool = False) -> None:
        self._app = app
        self._metrics = metrics
        self._graphql_path = graphql_path
        self._worker = worker
        self._log_probes = log_probes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        record = RequestRecord()
        scope[RECORD_KEY] = record
        graphql = scope.get("path") == self._graphql_path
        response: dict[str, Any] = {"status": 500, "complete": False, "body": []}
        body_read = asyncio.Event()

        async def receive_tracking() -> Message:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read.set()
            return message

        async def send_tracking(message: Message) -> None:
            if message["type"] == "http.response.start":
                response["status"] = message["status"]
            elif message["type"] == "http.response.body":
                if graphql:
                    response["body"].append(message.get("body", b""))
                if not message.get("more_body", False):
                    response["complete"] = True
            await send(message)

        task = asyncio.ensure_future(self._app(scope, receive_tracking, send_tracking))
        watcher = asyncio.ensure_future(self._watch(receive, body_read, task, record, response)) if graphql else None
        try:
            await task
        except asyncio.CancelledError:
            if record.code != DISCONNECTED:
                raise  # cancelled from outside (server shutdown), not by our disconnect watch
        finally:
            if watcher is not None:
                watcher.cancel()
            seconds = time.perf_counter() - started
            code = record.code or _code(response["status"], b"".join(response["body"]))
            if graphql:
                self._metrics.request_done(record.tenant, record.operation, code, seconds,
                                           record.cost if record.admitted else 0)
            if self._log_probes or scope.get("path") not in PROBES:
                log.info(json.dumps({
                    "time": _utc_now(), "worker": self._worker, "trace_id": record.trace_id,
                    "method": scope.get("method"), "path": scope.get("path"), "status": response["status"],
                    "tenant": record.tenant, "operation": record.operation if graphql else None,
                    "operation_name": record.name, "code": code, "latency_ms": round(seconds * 1000, 1),
                    "cost": record.cost}, separators=(",", ":")))

    @staticmethod
    async def _watch(receive: Receive, body_read: asyncio.Event, task: asyncio.Future, record: RequestRecord,
                     response: dict[str, Any]) -> None:
        """After the body, the next message is a disconnect (client gone, or our answer was sent)."""
        await body_read.wait()
        while not task.done():
            message = await receive()
            if message["type"] == "http.disconnect":
                if not response["complete"] and not task.done():
                    record.code = DISCONNECTED
                    if record.deadline is not None:
                        record.deadline.cancel()
                    task.cancel()
                return


def _utc_now() -> str:
    """ISO-8601 in UTC to the millisecond, as `2026-11-25T09:14:03.127Z`."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _code(status: int, body: bytes) -> str:
    """The first error's extensions.code of a GraphQL answer, else one from the HTTP status."""
    if b'"errors"' in body:
        try:
            errors = json.loads(body).get("errors") or []
            code = errors[0].get("extensions", {}).get("code")
            if isinstance(code, str):
                return code
        except (ValueError, AttributeError, IndexError, TypeError):
            pass
    if status < 400:
        return "OK"
    return STATUS_CODES.get(status, "HTTP_" + str(status))
