"""Hand-made hits for stage tests that need no store."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gateway.retrieval.hit import Hit, Provenance, SignalScore


def make_hit(source_id: str, score: float, content: str = "", *, chunk_id: str = "c0", tenant: str = "acme",
             namespace: str = "support", collection: str = "docs", metadata: dict[str, Any] | None = None,
             updated_at: datetime | None = None, parent_key: str | None = None, title: str | None = None) -> Hit:
    provenance = Provenance(tenant=tenant, namespace=namespace, collection=collection, trust_tier="first-party",
                            retriever="collection", mode="hybrid", scores=(SignalScore("dense", score, 1),),
                            content_hash=f"h-{source_id}-{chunk_id}", updated_at=updated_at)
    return Hit(namespace=namespace, collection=collection, source_id=source_id, chunk_id=chunk_id,
               content=content or f"content of {source_id}", score=score, provenance=provenance,
               metadata=metadata or {}, parent_key=parent_key, title=title)
