"""GET /mcp streams: their own budget per key and per process, a lifetime, and places freed on close."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.admission.gate import AdmissionObserver, Refusal
from gateway.errors import RateLimited
from gateway.mcp.streams import OpenStreams, StreamLimits, key_id
from gateway.settings import Settings
from tests.conftest import KEYS, ROOT, Gateway
from tests.serving import serve

LIFETIME_S = 3.0


class Seen(AdmissionObserver):
    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        self.refusals: list[tuple[str, Refusal]] = []

    def streams_open(self, tenant: str, count: int) -> None:
        self.open[tenant] = count

    def refused(self, tenant: str, reason: Refusal) -> None:
        self.refusals.append((tenant, reason))


def test_a_key_over_its_share_is_refused_and_a_closed_stream_frees_its_place():
    seen = Seen()
    now = [100.0]
    streams = OpenStreams(StreamLimits(per_key=2, per_process=3, max_s=60), seen, clock=lambda: now[0])
    with streams.held("a", "acme"):
        now[0] += 10
        with streams.held("a", "acme"):
            assert seen.open == {"acme": 2} and streams.open_for("a") == 2
            with pytest.raises(RateLimited, match=r"already holds 2 open GET /mcp streams; at most 2 per key "
                                                  r"\(GATEWAY_MCP_MAX_STREAMS_PER_KEY\)") as refused:
                with streams.held("a", "acme"):
                    pass
            # The oldest of the key's streams reaches its 60 s lifetime 50 s from now.
            assert refused.value.retry_after_s == 50 and refused.value.reason == "streams"
            with streams.held("b", "acme"):
                with pytest.raises(RateLimited, match=r"process already holds 3 open GET /mcp streams; at most 3 "
                                                      r"\(GATEWAY_MCP_MAX_STREAMS\)"):
                    with streams.held("c", "globex"):
                        pass
        with streams.held("a", "acme"):  # the closed one's place
            assert streams.total == 2
    assert streams.total == 0 and seen.open == {"acme": 0}
    assert seen.refusals == [("acme", Refusal.STREAMS), ("globex", Refusal.STREAMS)]


def test_spellings_of_one_key_count_as_that_key():
    assert key_id("Bearer k1") == key_id("bearer   k1 ") != key_id("Bearer k2")


@pytest.fixture(scope="module")
def streaming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    directory = tmp_path_factory.mktemp("mcp-streams")
    with serve(Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=ROOT / "tenants",
                        ingest_demo_on_start=False, mcp_max_streams_per_key=2, mcp_max_streams=3,
                        mcp_stream_max_s=LIFETIME_S)) as gateway:
        yield gateway


def _get(client: httpx.AsyncClient, gateway: Gateway, key: str):
    request = client.build_request("GET", f"{gateway.url}/mcp", headers={
        "Authorization": f"Bearer {KEYS[key]}", "Accept": "text/event-stream"})
    return client.send(request, stream=True)


def test_over_http_the_next_stream_is_429_until_one_closes(streaming: Gateway):
    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            first, second = await _get(client, streaming, "acme-reader"), await _get(client, streaming, "acme-reader")
            assert first.status_code == second.status_code == 200
            assert first.headers["content-type"].startswith("text/event-stream")
            third = await _get(client, streaming, "acme-reader")
            assert third.status_code == 429 and 1 <= int(third.headers["retry-after"]) <= LIFETIME_S
            error = (await third.aread()).decode()
            assert '"code": "RATE_LIMITED"' in error and "at most 2 per key" in error
            other = await _get(client, streaming, "globex-reader")  # another key: the process has room for one
            assert other.status_code == 200
            over = await _get(client, streaming, "globex-reader")
            assert over.status_code == 429 and "at most 3 (GATEWAY_MCP_MAX_STREAMS)" in (await over.aread()).decode()
            await first.aclose()
            again = await wait_for_place(client, streaming, "acme-reader")
            assert again.status_code == 200
            for response in (second, other, again):
                await response.aclose()
            for _ in range(50):  # the server sees the closes a moment after the client makes them
                metrics = (await client.get(f"{streaming.url}/metrics")).text
                if 'gateway_mcp_streams_open{tenant="acme"} 0.0' in metrics:
                    break
                await asyncio.sleep(0.1)
            assert 'gateway_mcp_streams_open{tenant="acme"} 0.0' in metrics
            # One refusal above, and more if the first place was not yet free when asked for again.
            refusals = re.search(r'gateway_rejections_total\{reason="streams",tenant="globex"\} (\S+)', metrics)
            assert refusals is not None and float(refusals.group(1)) == 1.0
            assert 'gateway_rejections_total{reason="streams",tenant="acme"}' in metrics

    asyncio.run(scenario())


async def wait_for_place(client: httpx.AsyncClient, gateway: Gateway, key: str) -> httpx.Response:
    """The server sees the close a moment after the client makes it."""
    for _ in range(50):
        response = await _get(client, gateway, key)
        if response.status_code != 429:
            return response
        await response.aclose()
        await asyncio.sleep(0.1)
    raise AssertionError("the closed stream's place was never freed")


def test_a_stream_ends_at_its_lifetime_and_frees_its_place(streaming: Gateway):
    async def scenario() -> float:
        async with httpx.AsyncClient(timeout=30) as client:
            started = time.monotonic()
            response = await _get(client, streaming, "acme-reader")
            assert response.status_code == 200
            await response.aread()  # returns only when the server ends the stream
            lasted = time.monotonic() - started
            await response.aclose()
            both = [await wait_for_place(client, streaming, "acme-reader"),
                    await _get(client, streaming, "acme-reader")]
            assert [r.status_code for r in both] == [200, 200]
            for each in both:
                await each.aclose()
            return lasted

    lasted = asyncio.run(scenario())
    assert LIFETIME_S - 0.5 <= lasted <= LIFETIME_S + 3
