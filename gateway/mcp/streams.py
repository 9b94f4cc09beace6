"""GET /mcp streams (Server-Sent Events): a bounded budget of their own, per API key and per process.

The endpoint is stateless, so nothing is ever sent on a GET stream (the SDK's clients open none
without a session), yet each one holds a connection, a file descriptor and tasks until it ends.
Request admission (gateway/admission) counts requests while they execute; a stream executes
nothing, so counting it against the tenant's concurrency would let two idle streams shut the
tenant's searches out. Streams are counted here instead: at most `per_key` open for one API key
and `per_process` in all, each closed after `max_s`; a stream over either cap is refused with
RATE_LIMITED (HTTP 429, Retry-After), and the admission observer sees every count and refusal
(gateway_mcp_streams_open, gateway_rejections_total{reason="streams"}).

Used on the server's event loop only (the /mcp endpoint runs there), so no lock.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gateway.admission.gate import AdmissionObserver, Refusal
from gateway.errors import RateLimited


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """GATEWAY_MCP_MAX_STREAMS_PER_KEY, GATEWAY_MCP_MAX_STREAMS and GATEWAY_MCP_STREAM_MAX_S."""

    per_key: int
    per_process: int
    max_s: float


def key_id(authorization: str) -> str:
    """Which key a stream belongs to, without keeping the key: a digest of the key as the
    authenticator reads it from `Bearer <key>` (so spellings of the header count as one key)."""
    key = authorization.partition(" ")[2].strip()
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


class OpenStreams:
    """The GET streams open in this process: opened under the caps, released when they end."""

    def __init__(self, limits: StreamLimits, observer: AdmissionObserver | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._observer = observer or AdmissionObserver()
        self._clock = clock
        self._opened: dict[str, list[float]] = {}  # key id -> when each of its streams opened
        self._tenants: dict[str, int] = {}

    @property
    def total(self) -> int:
        """Open in this process (a property, not __len__: an empty budget must not be falsy)."""
        return sum(len(times) for times in self._opened.values())

    def open_for(self, key: str) -> int:
        return len(self._opened.get(key, ()))

    @contextmanager
    def held(self, key: str, tenant: str) -> Iterator[None]:
        """One stream of `key` for as long as the block runs; RateLimited when a cap is reached."""
        opened_at = self._open(key, tenant)
        try:
            yield
        finally:
            self._close(key, tenant, opened_at)

    def _open(self, key: str, tenant: str) -> float:
        now = self._clock()
        own = self._opened.get(key, [])
        if len(own) >= self.limits.per_key:
            self._refuse(tenant, f"this API key already holds {len(own)} open GET /mcp streams; at most "
                                 f"{self.limits.per_key} per key (GATEWAY_MCP_MAX_STREAMS_PER_KEY)", own, now)
        if self.total >= self.limits.per_process:
            everyone = [t for times in self._opened.values() for t in times]
            self._refuse(tenant, f"this gateway process already holds {len(everyone)} open GET /mcp streams; "
                                 f"at most {self.limits.per_process} (GATEWAY_MCP_MAX_STREAMS)", everyone, now)
        self._opened.setdefault(key, []).append(now)
        self._tenants[tenant] = self._tenants.get(tenant, 0) + 1
        self._observer.streams_open(tenant, self._tenants[tenant])
        return now

    def _close(self, key: str, tenant: str, opened_at: float) -> None:
        own = self._opened[key]
        own.remove(opened_at)
        if not own:
            del self._opened[key]
        self._tenants[tenant] -= 1
        self._observer.streams_open(tenant, self._tenants[tenant])

    def _refuse(self, tenant: str, why: str, opened: list[float], now: float) -> None:
        # The earliest a place surely frees: the oldest of those streams reaching its lifetime.
        wait_s = max(0.0, min(opened) + self.limits.max_s - now) if opened else 1.0
        self._observer.refused(tenant, Refusal.STREAMS)
        raise RateLimited(f"{why}; close one, or retry after {wait_s:.0f} s, when the oldest reaches its "
                          f"lifetime of {self.limits.max_s:g} s (GATEWAY_MCP_STREAM_MAX_S)",
                          reason=Refusal.STREAMS.value, retry_after_s=wait_s)
