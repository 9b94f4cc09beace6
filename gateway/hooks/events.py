"""Lifecycle events of one search, as JSON-ready mappings.

`retrieval:start` comes first (with what the request asked for), then `stage:start`/`stage:end`
for every traced stage (route, retrieve, fan-out, pipeline stages), then exactly one of
`retrieval:end` (with what was resolved: namespace, collections, retriever, mode, counts) or
`retrieval:failed` (with the error code). Events carry names, counts, durations and codes, never
query text or content, unless the tenant sets `hooks.include_query` (then the retrieval events
carry `query`). Planned queries, previews and stage details are never in events.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gateway.errors import ErrorCode, GatewayError
from gateway.retrieval.trace import Phase, StageTrace


class EventName(StrEnum):
    RETRIEVAL_START = "retrieval:start"
    RETRIEVAL_END = "retrieval:end"
    RETRIEVAL_FAILED = "retrieval:failed"
    STAGE_START = "stage:start"
    STAGE_END = "stage:end"


# The one errorCode outside ErrorCode: the caller went away (or a deadline cancelled the task).
CANCELLED = "CANCELLED"

Emit = Callable[[dict[str, Any]], None]


def error_code(error: BaseException) -> str:
    if isinstance(error, GatewayError):
        return error.code.value
    if isinstance(error, asyncio.CancelledError):
        return CANCELLED
    return ErrorCode.INTERNAL.value


class SearchEvents:
    """The events of one search for one tenant; `emit` only queues (see delivery.py).

    Also a trace observer: the TraceRecorder calls `stage_started` and `stage_ended`.
    """

    def __init__(self, emit: Emit, tenant: str, query: str | None) -> None:
        self._emit = emit
        self._tenant = tenant
        self._query = query  # None unless the tenant opted in
        self.retrieval_id = uuid.uuid4().hex
        self._sequence = 0
        self._started = time.perf_counter()

    def started(self, namespace: str | None, collections: Sequence[str], mode: str | None) -> None:
        self._send(EventName.RETRIEVAL_START, namespace=namespace, collections=list(collections), mode=mode,
                   **self._query_field())

    def stage_started(self, name: str, phase: Phase, input_count: int) -> None:
        self._send(EventName.STAGE_START, stage={"name": name, "phase": phase.value},
                   counts={"input": input_count})

    def stage_ended(self, stage: StageTrace) -> None:
        self._send(EventName.STAGE_END, stage={"name": stage.name, "phase": stage.phase.value,
                                               "status": stage.status.value},
                   counts={"input": stage.input_count, "output": stage.output_count,
                           "warnings": len(stage.warnings)},
                   durationMs=stage.duration_ms)

    def ended(self, namespace: str | None, collections: Sequence[str], retriever: str, mode: str | None,
              counts: Mapping[str, int]) -> None:
        self._send(EventName.RETRIEVAL_END, namespace=namespace, collections=list(collections),
                   retriever=retriever, mode=mode, counts=dict(counts), durationMs=self._elapsed_ms(),
                   **self._query_field())

    def failed(self, error: BaseException, namespace: str | None, collections: Sequence[str]) -> None:
        self._send(EventName.RETRIEVAL_FAILED, namespace=namespace, collections=list(collections),
                   errorCode=error_code(error), durationMs=self._elapsed_ms(), **self._query_field())

    def _query_field(self) -> dict[str, str]:
        return {"query": self._query} if self._query is not None else {}

    def _elapsed_ms(self) -> float:
        return round((time.perf_counter() - self._started) * 1000, 3)

    def _send(self, name: EventName, **fields: Any) -> None:
        self._sequence += 1
        # Unique without another random draw per event: the search's id and the event's position.
        self._emit({"event": name.value, "eventId": f"{self.retrieval_id}-{self._sequence}",
                    "retrievalId": self.retrieval_id,
                    "tenant": self._tenant, "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
                    **fields})
