"""parentExpand: attach each hit's parent record, keeping the child's identity and score."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from gateway.admission.scheduler import offload
from gateway.errors import InvalidInput
from gateway.retrieval.hit import Hit, Parent
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope
from gateway.tenancy.pipelines import OnError, ParentExpandParams


def cut(text: str, limit: int) -> str:
    """At most `limit` characters, ending at a sentence or word boundary when one is near."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    for boundary in (". ", "\n", " "):
        at = head.rfind(boundary)
        if at >= limit // 2:
            return head[:at + 1].rstrip()
    return head


class ParentExpand:
    name = "parentExpand"
    depth = 0

    def __init__(self, params: ParentExpandParams, store: MilvusStore) -> None:
        self.on_error: OnError = params.on_error
        self._params = params
        self._store = store

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        wanted: dict[Scope, set[str]] = {}
        for hit in hits:
            if hit.parent_key and hit.parent is None:
                wanted.setdefault(Scope(hit.provenance.tenant, hit.namespace, hit.collection), set()).add(hit.parent_key)
        scopes = list(wanted)
        loaded = await asyncio.gather(*(offload(self._store.parents, scope, sorted(wanted[scope]))
                                        for scope in scopes))
        records = dict(zip(scopes, loaded))
        out, missing = [], []
        for hit in hits:
            if hit.parent is not None:
                out.append(hit)
                continue
            scope = Scope(hit.provenance.tenant, hit.namespace, hit.collection)
            record = records.get(scope, {}).get(hit.parent_key or "")
            if record is None:
                missing.append(hit.id)
                out.append(hit)
                continue
            parent = Parent(key=record.key, source_id=record.source_id, title=record.title or None,
                            content=cut(record.text, self._params.max_parent_chars), metadata=record.metadata)
            out.append(replace(hit, parent=parent))
        handle.detail["expanded"] = len(hits) - len(missing)
        if missing:
            message = f"{len(missing)} hit(s) have no parent record: {', '.join(missing[:5])}"
            if self._params.missing == "error":
                raise InvalidInput(f"parentExpand (missing: error): {message}")
            if self._params.missing == "warn":
                handle.warn(message)
        return out
