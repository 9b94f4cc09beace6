"""The typed, frozen request context, built once per request."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace as otel
from strawberry.dataloader import DataLoader

from gateway.admin.service import Admin
from gateway.admission.scheduler import offload
from gateway.ingest.service import Writer
from gateway.jobs.runner import IngestJobs
from gateway.mcp.tools import Tools
from gateway.routing.searcher import Searcher
from gateway.storage.milvus import MilvusStore, ParentRecord
from gateway.telemetry.spans import private_span
from gateway.tenancy.auth import Principal
from gateway.tenancy.platform import Platform

ParentKey = tuple[str, str, str]  # (namespace, collection, parent key), always within the caller's tenant


@dataclass(frozen=True)
class Context:
    principal: Principal
    searcher: Searcher
    writer: Writer
    tools: Tools
    tracer: otel.Tracer
    parents: DataLoader[ParentKey, ParentRecord | None]
    # The admin API and ingest jobs (gateway/admin, gateway/jobs).
    admin: Admin | None = None
    jobs: IngestJobs | None = None
    # The platform operator's tenant lifecycle (gateway/tenancy/platform.py); platform key only.
    platform: Platform | None = None
    # Collections left out of a federated search, reported in the response extensions.
    partial_failures: list[dict[str, Any]] = field(default_factory=list)


def parent_loader(principal: Principal, searcher: Searcher, store: MilvusStore,
                  tracer: otel.Tracer) -> DataLoader[ParentKey, ParentRecord | None]:
    """One batched parent lookup per (namespace, collection) per request: no N+1."""

    async def load(keys: Sequence[ParentKey]) -> list[ParentRecord | None]:
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for namespace, collection, key in keys:
            groups[(namespace, collection)].append(key)
        found: dict[ParentKey, ParentRecord] = {}
        with private_span(tracer, "gateway.parents.load") as span:
            span.set_attribute("gateway.input_count", len(keys))
            span.set_attribute("gateway.collection_count", len(groups))
            for (namespace, collection), group in groups.items():
                ref = searcher.registry.resolve(principal.tenant, collection, namespace=namespace)
                records = await offload(store.parents, ref.scope, group)
                for key, record in records.items():
                    found[(namespace, collection, key)] = record
            span.set_attribute("gateway.output_count", len(found))
        return [found.get(key) for key in keys]

    return DataLoader(load_fn=load)
