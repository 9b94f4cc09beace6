"""Conversation turns stored in Milvus: one row a turn, in a per-tenant record collection.

A turn holds the query, the query actually searched (after follow-up resolution), the ids of
the hits it returned and its time. Reads skip expired turns; an append deletes the
conversation's expired turns and those beyond `max_turns`, so a conversation never holds more
than `max_turns` live rows. The collection is per tenant (its physical name includes the
tenant) and every read and delete also goes through `MilvusStore._boundary`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from pymilvus import DataType

from gateway.storage.filters import literal
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import MAX_SHORT, Scope, add_placeholder_vector, physical_name, placeholder_index

# A namespace no tenant file can name (names start with a letter or digit), so these rows never
# share a scope with documents.
NAMESPACE = "_conversations"
_FIELDS = ["id", "conversation_id", "turn", "query", "resolved_query", "resolved_from", "hits",
           "created_at", "expires_at"]
_QUERY_CHARS = MAX_SHORT


@dataclass(frozen=True, slots=True)
class Turn:
    """One recorded search of a conversation. `hits` are qualified ids (namespace/collection/source/chunk)."""

    conversation_id: str
    turn: int
    query: str
    resolved_query: str
    hits: tuple[str, ...]
    created_at: int  # epoch milliseconds
    expires_at: int
    # The turn number whose query resolved this one (0: it stood alone).
    resolved_from: int = 0

    @property
    def sources(self) -> tuple[str, ...]:
        """namespace/collection/sourceId of each hit, in rank order, without repeats."""
        return tuple(dict.fromkeys(h.rsplit("/", 1)[0] for h in self.hits))


def scope(tenant: str) -> Scope:
    return Scope(tenant, NAMESPACE, "turns")


def _schema(client):
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=256)
    schema.add_field("tenant", DataType.VARCHAR, max_length=256)
    schema.add_field("namespace", DataType.VARCHAR, max_length=256)
    schema.add_field("conversation_id", DataType.VARCHAR, max_length=256)
    schema.add_field("turn", DataType.INT64)
    schema.add_field("query", DataType.VARCHAR, max_length=_QUERY_CHARS * 4)
    schema.add_field("resolved_query", DataType.VARCHAR, max_length=_QUERY_CHARS * 4)
    schema.add_field("resolved_from", DataType.INT64)
    schema.add_field("hits", DataType.JSON)
    schema.add_field("created_at", DataType.INT64)
    schema.add_field("expires_at", DataType.INT64)
    add_placeholder_vector(schema)  # rows read by filter only (storage/schema.py)
    return schema


class TurnStore:
    """Append, read and clear the turns of one tenant's conversations (blocking: call via offload)."""

    def __init__(self, store: MilvusStore, clock=time.time) -> None:
        self._store = store
        self._clock = clock

    def _open(self, tenant: str) -> tuple[Scope, str]:
        where = scope(tenant)
        name = physical_name(where, "t")
        self._store.ensure_records(where, name, _schema, placeholder_index)
        return where, name

    def _exists(self, tenant: str) -> bool:
        """Whether the tenant has ever recorded a turn (reads do not create the collection)."""
        return self._store.has_records(physical_name(scope(tenant), "t"))

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def recent(self, tenant: str, conversation_id: str, last: int, max_turns: int) -> list[Turn]:
        """The last `last` live turns, oldest first."""
        if not self._exists(tenant):
            return []
        where, name = self._open(tenant)
        rows = self._store.query_records(
            where, name, f"conversation_id == {literal(conversation_id)} and expires_at > {self.now_ms()}",
            _FIELDS, limit=4 * max_turns + 16)
        turns = sorted((_turn(row) for row in rows), key=lambda t: (t.turn, t.created_at))
        return turns[-last:] if last > 0 else []

    def append(self, tenant: str, conversation_id: str, query: str, resolved_query: str,
               resolved_from: int, hits: Sequence[str], *, number: int, ttl_ms: int, max_turns: int) -> Turn:
        where, name = self._open(tenant)
        now = self.now_ms()
        turn = Turn(conversation_id, number, query[:_QUERY_CHARS], resolved_query[:_QUERY_CHARS],
                    tuple(hits), now, now + ttl_ms, resolved_from)
        # Unique across processes without coordination: time, then randomness.
        row_id = f"{conversation_id}/{now:013d}-{uuid.uuid4().hex[:12]}"
        self._store.insert_records(where, name, [{
            "id": row_id, "conversation_id": conversation_id, "turn": number, "query": turn.query,
            "resolved_query": turn.resolved_query, "resolved_from": resolved_from, "hits": list(turn.hits),
            "created_at": now, "expires_at": turn.expires_at, "placeholder": [0.0, 0.0]}])
        cutoff = number - max_turns
        self._store.delete_records(where, name, f"conversation_id == {literal(conversation_id)} and "
                                                f"(expires_at <= {now} or turn <= {cutoff})")
        return turn

    def clear(self, tenant: str, conversation_id: str) -> int:
        if not self._exists(tenant):
            return 0
        where, name = self._open(tenant)
        live = self._store.query_records(where, name, f"conversation_id == {literal(conversation_id)}",
                                         ["id"], limit=16_384)
        if not live:
            return 0
        self._store.delete_records(where, name, f"conversation_id == {literal(conversation_id)}")
        return len(live)


def _turn(row: dict) -> Turn:
    hits = row.get("hits") or []
    if isinstance(hits, (str, bytes)):
        hits = json.loads(hits)
    return Turn(row["conversation_id"], int(row["turn"]), row["query"], row["resolved_query"],
                tuple(str(h) for h in hits), int(row["created_at"]), int(row["expires_at"]),
                int(row.get("resolved_from") or 0))
