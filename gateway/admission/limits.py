"""A tenant's admission limits: settings give the defaults, the tenant file's `limits:` overrides.

Limits are per gateway process: with N worker processes or replicas a tenant may use N times
each figure (there is no shared store for them yet).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

# Cost units in flight per core when GATEWAY_TENANT_MAX_INFLIGHT_COST is 0 (gateway/settings.py).
INFLIGHT_COST_PER_CORE = 3_000


@dataclass(frozen=True, slots=True)
class TenantLimits:
    max_concurrent: int          # requests executing at once
    queue_size: int              # requests waiting for a slot; beyond this: 429
    queue_timeout_s: float       # longest wait in that queue before 429
    rate: float                  # requests a second (token bucket)
    burst: int                   # requests saved up
    max_cost: int                # cost units one request may have (LIMIT_EXCEEDED above)
    cost_rate: float             # cost units a second (token bucket)
    cost_burst: int              # cost units saved up; at least max_cost
    deadline_s: float            # server-side deadline of each request
    max_running: int             # blocking jobs (embedding, Milvus, CPU stages) running at once
    max_inflight_cost: int = 20_000  # cost units of requests executing at once (one runs regardless)

    def __post_init__(self) -> None:
        if self.cost_burst < self.max_cost:
            raise ValueError(f"cost_burst {self.cost_burst} is below max_cost {self.max_cost}: a request "
                             "at the ceiling could never be admitted; raise cost_burst or lower max_cost")

    def override(self, values: dict[str, Any]) -> TenantLimits:
        """These limits with the given fields replaced (None keeps the default)."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})


def default_limits(settings: Any) -> TenantLimits:
    """The limits every tenant gets unless its file says otherwise."""
    return TenantLimits(
        max_concurrent=settings.tenant_max_concurrent, queue_size=settings.tenant_queue_size,
        queue_timeout_s=settings.tenant_queue_timeout_ms / 1000, rate=settings.tenant_rate,
        burst=settings.tenant_burst, max_cost=settings.tenant_max_cost, cost_rate=settings.tenant_cost_rate,
        cost_burst=settings.tenant_cost_burst, deadline_s=settings.deadline_ms / 1000,
        max_running=settings.tenant_max_running,
        max_inflight_cost=settings.tenant_max_inflight_cost or INFLIGHT_COST_PER_CORE * (os.cpu_count() or 1))


def tenant_limits(defaults: TenantLimits, config: Any) -> TenantLimits:
    """`defaults` with a tenant file's `limits:` section (a LimitsConfig) applied."""
    values = config.model_dump()
    for key in ("queue_timeout_ms", "deadline_ms"):
        millis = values.pop(key)
        values[key.removesuffix("_ms") + "_s"] = millis / 1000 if millis is not None else None
    return defaults.override(values)
