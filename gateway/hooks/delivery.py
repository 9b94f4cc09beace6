"""Delivering a tenant's lifecycle events without ever slowing a search.

Each sink (the tenant's Python subscribers, its webhook) has its own bounded queue and its own
worker thread. A search only puts events on the queues (`put_nowait`); when a queue is full the
event is dropped and counted. So a hanging webhook fills its own queue and nothing else: the
search, the tenant's subscribers and every other tenant's hooks go on as before. Threads rather
than asyncio tasks, because the searcher outlives event loops (the CLI and tests run one loop
per call) and a blocking subscriber must not hold the serving loop.

Webhook: `POST <url>` with the event as JSON, headers `X-Gateway-Event`, `X-Gateway-Delivery`
(the event id, the same on every retry, for receivers to deduplicate) and, with a secret,
`X-Gateway-Signature: sha256=<hex HMAC-SHA256 of the body>`. Connection errors, timeouts, HTTP
408, 429 and 5xx are retried `retries` times, waiting `backoff_ms`, then twice that, and so on;
other answers are final.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import json
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.entry_points import SUBSCRIBER, load_entry_point
from gateway.hooks.events import Emit, SearchEvents
from gateway.retrieval.llm import secret_from
from gateway.tenancy.config import HooksConfig, TenantConfig, WebhookConfig
from gateway.tenancy.registry import TenantRegistry

log = logging.getLogger("gateway.hooks")
SIGNATURE_HEADER = "X-Gateway-Signature"
_RETRY_STATUSES = frozenset({408, 429})
_STOP = object()


@dataclass(frozen=True, slots=True)
class SinkStats:
    """Counters of one sink since start-up."""

    queued: int
    dropped: int
    delivered: int
    failed: int
    retried: int


class Sink:
    """A bounded queue drained by one daemon thread that hands each event to `deliver`."""

    def __init__(self, name: str, deliver: Callable[[Mapping[str, Any]], bool], size: int) -> None:
        self.name = name
        self._deliver = deliver
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=size)
        self._lock = threading.Lock()
        self._counts = {"queued": 0, "dropped": 0, "delivered": 0, "failed": 0, "retried": 0}
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gateway-hooks-{name}", daemon=True)
        self._thread.start()

    def put(self, event: Mapping[str, Any]) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.count("dropped")
        else:
            self.count("queued")

    def count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1

    @property
    def stats(self) -> SinkStats:
        with self._lock:
            return SinkStats(**self._counts)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued event was handled (delivered or given up); False on timeout."""
        with self._queue.all_tasks_done:
            return self._queue.all_tasks_done.wait_for(lambda: self._queue.unfinished_tasks == 0, timeout_s)

    def close(self, timeout_s: float) -> None:
        self.flush(timeout_s)
        self.stopping.set()
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is _STOP:
                    return
                self.count("delivered" if self._deliver(event) else "failed")
            except Exception as exc:  # a sink never dies of one event
                log.error("hook sink %s failed on an event: %s", self.name, type(exc).__name__, exc_info=exc)
                self.count("failed")
            finally:
                self._queue.task_done()


class Subscribers:
    """Calls each of the tenant's Python subscribers (sync or async) with the event, in order."""

    def __init__(self, functions: Mapping[str, Callable[..., Any]]) -> None:
        self._functions = dict(functions)
        self._loop: asyncio.AbstractEventLoop | None = None  # the sink thread's own loop, for async ones

    def __call__(self, event: Mapping[str, Any]) -> bool:
        ok = True
        for spec, function in self._functions.items():
            try:
                # A copy each (events are JSON): the webhook's thread serialises the same event concurrently.
                result = function(json.loads(json.dumps(event)))
                if inspect.isawaitable(result):
                    if self._loop is None:
                        self._loop = asyncio.new_event_loop()
                    self._loop.run_until_complete(result)
            except Exception as exc:
                log.warning("hook subscriber %s failed on %s: %s", spec, event.get("event"), type(exc).__name__,
                            exc_info=exc)
                ok = False
        return ok


class Webhook:
    """POSTs one event, signed, with retries and exponential backoff."""

    def __init__(self, config: WebhookConfig, secret: bytes | None, sink: Callable[[], Sink | None]) -> None:
        self._config = config
        self._secret = secret
        self._sink = sink
        self._client = httpx.Client(timeout=config.timeout_ms / 1000)

    def signature(self, body: bytes) -> str:
        assert self._secret is not None
        return "sha256=" + hmac.new(self._secret, body, hashlib.sha256).hexdigest()

    def __call__(self, event: Mapping[str, Any]) -> bool:
        body = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json", "X-Gateway-Event": str(event["event"]),
                   "X-Gateway-Delivery": str(event["eventId"])}
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = self.signature(body)
        sink = self._sink()
        for attempt in range(self._config.retries + 1):
            if attempt:
                if sink is not None:
                    sink.count("retried")
                    if sink.stopping.wait(self._config.backoff_ms / 1000 * 2 ** (attempt - 1)):
                        return False  # shutting down: no more waiting
            try:
                status = self._client.post(self._config.url, content=body, headers=headers).status_code
            except httpx.HTTPError as exc:
                log.info("webhook %s: %s (attempt %d)", self._config.url, type(exc).__name__, attempt + 1)
                continue
            if 200 <= status < 300:
                return True
            if status not in _RETRY_STATUSES and status < 500:
                log.warning("webhook %s answered HTTP %d to %s; not retried", self._config.url, status,
                            event["event"])
                return False
        log.warning("webhook %s: %s not delivered after %d attempt(s)", self._config.url, event["event"],
                    self._config.retries + 1)
        return False

    def close(self) -> None:
        self._client.close()


class TenantHooks:
    """One tenant's sinks; `emit` is what a search calls, and it never blocks."""

    def __init__(self, tenant: TenantConfig, environ: Mapping[str, str]) -> None:
        config: HooksConfig = tenant.hooks
        self.include_query = config.include_query
        self.sinks: dict[str, Sink] = {}
        self._webhook: Webhook | None = None
        functions = {spec: load_entry_point(spec, f"tenant {tenant.id!r} {SUBSCRIBER[0]}", SUBSCRIBER[1],
                                            SUBSCRIBER[2]) for spec in config.subscribers}
        secret = None
        if config.webhook is not None:
            value = secret_from(environ, config.webhook.secret_env, f"tenant {tenant.id!r} hooks.webhook",
                                "signing secret")
            secret = value.encode() if value is not None else None
        if functions:
            self.sinks["subscribers"] = Sink(f"{tenant.id}-subscribers", Subscribers(functions), config.queue_size)
        if config.webhook is not None:
            self._webhook = Webhook(config.webhook, secret, lambda: self.sinks.get("webhook"))
            self.sinks["webhook"] = Sink(f"{tenant.id}-webhook", self._webhook, config.queue_size)

    def emit(self, event: Mapping[str, Any]) -> None:
        for sink in self.sinks.values():
            sink.put(event)

    def flush(self, timeout_s: float = 10.0) -> bool:
        return all(sink.flush(timeout_s) for sink in self.sinks.values())

    def close(self, timeout_s: float = 2.0) -> None:
        for sink in self.sinks.values():
            sink.close(timeout_s)
        if self._webhook is not None:
            self._webhook.close()


class Hooks:
    """Every tenant's hooks, built at start-up; a tenant without `hooks` has none (and no threads)."""

    def __init__(self, registry: TenantRegistry, environ: Mapping[str, str]) -> None:
        self._tenants = {tenant.id: TenantHooks(tenant, environ) for tenant in registry if tenant.hooks.enabled}

    def tenant(self, tenant: str) -> TenantHooks | None:
        return self._tenants.get(tenant)

    def search_events(self, tenant: str, query: str) -> SearchEvents | None:
        """The events of one search of `tenant`, delivered only to that tenant's sinks."""
        hooks = self._tenants.get(tenant)
        if hooks is None:
            return None
        emit: Emit = hooks.emit
        return SearchEvents(emit, tenant, query if hooks.include_query else None)

    def stats(self) -> dict[tuple[str, str], SinkStats]:
        """(tenant, sink) -> that sink's counters."""
        return {(tenant, name): sink.stats for tenant, hooks in self._tenants.items()
                for name, sink in hooks.sinks.items()}

    def close(self) -> None:
        for hooks in self._tenants.values():
            hooks.close()
