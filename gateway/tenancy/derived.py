"""Objects built from a tenant's configuration on first use, kept for the most recently used tenants.

A process may know tens of thousands of tenants, most of them idle. What the gateway derives
from a tenant's config (router chain, pipelines, cost model, custom retrievers) is therefore
built when the tenant first needs it, not at start-up, and only the `size` most recently used
tenants keep theirs: the memory it takes is bounded for the whole process, not per tenant. An
entry is rebuilt when the tenant's config object changes (a reload or an API update replaces it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Tenants whose derived objects a process keeps: the active set of a busy process, with room.
DEFAULT_SIZE = 2048


class PerTenant(Generic[T]):
    """`get(tenant_id)` is `build(config)` for the tenant's current config, built at most once per config."""

    def __init__(self, config_of: Callable[[str], Any], build: Callable[[Any], T], size: int = DEFAULT_SIZE) -> None:
        if size < 1:
            raise ValueError(f"a per-tenant cache needs room for at least one tenant, got {size}")
        self._config_of = config_of
        self._build = build
        self._size = size
        self._entries: OrderedDict[str, tuple[Any, T]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, tenant_id: str) -> T:
        config = self._config_of(tenant_id)
        with self._lock:
            entry = self._entries.get(tenant_id)
            if entry is not None and entry[0] is config:
                self._entries.move_to_end(tenant_id)
                return entry[1]
        value = self._build(config)  # outside the lock: a slow build holds up no other tenant
        with self._lock:
            self._entries[tenant_id] = (config, value)
            self._entries.move_to_end(tenant_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return value
