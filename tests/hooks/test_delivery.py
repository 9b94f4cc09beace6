"""Webhook delivery to a real loopback receiver: signatures, retries, a hanging receiver, bounded queues."""

import asyncio
import hashlib
import hmac
import threading

import pytest

from gateway.errors import ConfigError
from gateway.hooks.delivery import SIGNATURE_HEADER, TenantHooks
from gateway.hooks.events import SearchEvents
from gateway.routing.searcher import Searcher, SearchRequest
from gateway.settings import Settings
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role, TenantConfig
from gateway.tenancy.registry import TenantRegistry
from tests.hooks.subscribers import SEEN
from tests.loopback import loopback_server

SECRET = "s3cret-for-tests"


def config(url: str, subscribers: bool = False, queue_size: int = 1000, **webhook) -> TenantConfig:
    hooks = {"webhook": {"url": url, "secret_env": "HOOK_SECRET", "backoff_ms": 1, **webhook},
             "queue_size": queue_size}
    if subscribers:
        hooks["subscribers"] = ["tests.hooks.subscribers:record_acme"]
    return TenantConfig.model_validate({
        "id": "acme", "hooks": hooks,
        "namespaces": {"help": {"collections": {
            "faq": {"trust_tier": "partner", "retriever": "tests.retrieval.faq_retriever:lookup"}}}}})


def emit_search(hooks: TenantHooks) -> None:
    events = SearchEvents(hooks.emit, "acme", None)
    events.started("help", ["help/faq"], None)
    events.ended("help", ["help/faq"], "collection", "hybrid", {"hits": 1})


def test_events_are_posted_signed_and_retried_until_the_receiver_recovers():
    answers = iter([500, 503])  # two failures, then success

    def receiver(path, body):
        return next(answers, 200), {}

    with loopback_server(receiver) as (url, seen):
        hooks = TenantHooks(config(url, retries=3), {"HOOK_SECRET": SECRET})
        emit_search(hooks)
        assert hooks.flush(10)
        hooks.close()
    stats = hooks.sinks["webhook"].stats
    assert (stats.queued, stats.delivered, stats.failed, stats.retried, stats.dropped) == (2, 2, 0, 2, 0)
    # The first event was tried three times under one delivery id; the second once.
    deliveries = [r["headers"]["X-Gateway-Delivery"] for r in seen]
    assert len(seen) == 4 and deliveries[0] == deliveries[1] == deliveries[2] != deliveries[3]
    assert [r["body"]["event"] for r in seen] == ["retrieval:start"] * 3 + ["retrieval:end"]
    for request in seen:
        expected = "sha256=" + hmac.new(SECRET.encode(), request["raw"], hashlib.sha256).hexdigest()
        assert request["headers"][SIGNATURE_HEADER] == expected
        assert request["headers"]["X-Gateway-Event"] == request["body"]["event"]


def test_a_client_error_is_not_retried_and_counts_as_failed():
    with loopback_server(lambda path, body: (404, {})) as (url, seen):
        hooks = TenantHooks(config(url, retries=3), {"HOOK_SECRET": SECRET})
        emit_search(hooks)
        assert hooks.flush(10)
        hooks.close()
    assert len(seen) == 2 and hooks.sinks["webhook"].stats.failed == 2


def test_a_missing_signing_secret_stops_start_up():
    with pytest.raises(ConfigError, match="signing secret from \\$HOOK_SECRET, which is not set"):
        TenantHooks(config("http://127.0.0.1:9/hooks"), {})


def test_a_hanging_receiver_never_holds_a_search_and_its_full_queue_drops(lite_store, embedder):
    release = threading.Event()
    answered: list[bool] = []

    def hanging(path, body):
        release.wait(60)
        answered.append(True)
        return 200, {}

    SEEN.clear()
    with loopback_server(hanging) as (url, seen):
        tenant = config(url, subscribers=True, queue_size=2, retries=0, timeout_ms=60_000)
        searcher = Searcher(TenantRegistry({"acme": tenant}), lite_store, embedder, Settings(),
                            environ={"HOOK_SECRET": SECRET})
        results = [asyncio.run(searcher.search(Principal("acme", Role.READER),
                                               SearchRequest("reset password", collection="faq")))
                   for _ in range(5)]
        # Every search returned while the receiver still held the first event unanswered.
        assert all(r.hits for r in results) and answered == []
        hooks = searcher.hooks.tenant("acme")
        webhook = hooks.sinks["webhook"].stats
        assert webhook.delivered == 0 and webhook.dropped > 0
        assert webhook.queued + webhook.dropped == 5 * 6  # start, route x2, retrieve x2, end per search
        # The subscribers' own queue is not behind the hanging webhook: it drains while the webhook hangs.
        subscribers = hooks.sinks["subscribers"]
        assert subscribers.flush(10) and answered == []
        assert subscribers.stats.delivered == subscribers.stats.queued == len(SEEN["acme"]) > 0
        release.set()
        searcher.close()
    assert len(seen) >= 1
