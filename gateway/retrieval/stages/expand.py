"""parentExpand: attach each hit's parent record, keeping the child's identity and score.

A parent longer than `maxParentChars` is cut to a window centred on the matched child, so the
child is always inside it and the context grows evenly on both sides (the chunker joins a
parent's sentences with single spaces and cuts children from them, so a child is a substring
of its parent). The window's ends are pulled in to sentence or word boundaries.
"""

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


def window(text: str, child: str, limit: int) -> tuple[str, bool]:
    """At most `limit` characters of `text` around `child`, and whether `child` was located.

    Unlocated (a child rewritten by an earlier stage), the window is cut from the start.
    """
    if len(text) <= limit:
        return text, child in text
    start = text.find(child) if child else -1
    if start < 0:
        return cut(text, limit), False
    end = start + len(child)
    if end - start >= limit:
        return cut(text[start:], limit), True
    room = limit - (end - start)
    left = max(0, start - room // 2)
    right = min(len(text), left + limit)
    left = max(0, right - limit)
    return _trim(text, left, right, start, end), True


def _trim(text: str, left: int, right: int, start: int, end: int) -> str:
    """text[left:right], its ends moved inwards to a sentence, else word, boundary outside the child."""
    if left > 0:
        head = text[left:start]
        for boundary in (". ", " "):
            at = head.find(boundary)
            if at >= 0:
                left += at + len(boundary)
                break
        else:
            left = start
    if right < len(text):
        tail = text[end:right]
        for boundary in (". ", " "):
            at = tail.rfind(boundary)
            if at >= 0:
                right = end + at + (1 if boundary == ". " else 0)
                break
        else:
            right = end
    return text[left:right].strip()


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
        out, missing, unlocated = [], [], []
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
            content, located = window(record.text, hit.content, self._params.max_parent_chars)
            if not located:
                unlocated.append(hit.id)
            parent = Parent(key=record.key, source_id=record.source_id, title=record.title or None,
                            content=content, metadata=record.metadata)
            out.append(replace(hit, parent=parent))
        handle.detail["expanded"] = len(hits) - len(missing)
        if unlocated:
            handle.warn(f"{len(unlocated)} hit(s) not found in their parent's text (changed by an earlier "
                        f"stage?); their parent is cut from its start: {', '.join(unlocated[:5])}")
        if missing:
            message = f"{len(missing)} hit(s) have no parent record: {', '.join(missing[:5])}"
            if self._params.missing == "error":
                raise InvalidInput(f"parentExpand (missing: error): {message}")
            if self._params.missing == "warn":
                handle.warn(message)
        return out
