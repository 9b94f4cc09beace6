"""Per-request trace: one record per stage, mirrored as OpenTelemetry spans.

Trace records carry bounded previews for the caller (at most 5 items, 200 characters each);
spans carry only names, phases, counts, durations and status — never query text or content.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from opentelemetry import trace as otel
from opentelemetry.trace import Status, StatusCode

from gateway.retrieval.hit import Hit
from gateway.telemetry.spans import private_span

PREVIEW_ITEMS = 5
PREVIEW_CHARS = 200


class Phase(StrEnum):
    ROUTE = "route"
    RETRIEVE = "retrieve"
    QUERY = "query"
    HITS = "hits"


class StageStatus(StrEnum):
    OK = "ok"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class StageTrace:
    name: str
    phase: Phase
    status: StageStatus
    duration_ms: float
    input_count: int
    output_count: int
    warnings: tuple[str, ...] = ()
    preview: tuple[str, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Trace:
    trace_id: str
    duration_ms: float
    stages: tuple[StageTrace, ...]
    warnings: tuple[str, ...] = ()

    def all_warnings(self) -> list[str]:
        """Every stage's warnings, then the request's own: the reasons a result is what it is."""
        return [w for stage in self.stages for w in stage.warnings] + list(self.warnings)


def preview_hits(hits: Sequence[Hit]) -> tuple[str, ...]:
    return tuple(f"[{h.source_id}/{h.chunk_id}] ({h.score:.4f}) {h.content[:PREVIEW_CHARS]}"
                 for h in hits[:PREVIEW_ITEMS])


def preview_texts(texts: Sequence[str]) -> tuple[str, ...]:
    return tuple(t[:PREVIEW_CHARS] for t in texts[:PREVIEW_ITEMS])


class StageHandle:
    """What a running stage reports: its output, warnings, a skip, and route details."""

    def __init__(self, input_count: int) -> None:
        self.input_count = input_count
        self.output_count = 0
        self.preview: tuple[str, ...] = ()
        self.warnings: list[str] = []
        self.detail: dict[str, Any] = {}
        self.status = StageStatus.OK

    def hits(self, hits: Sequence[Hit]) -> None:
        self.output_count = len(hits)
        self.preview = preview_hits(hits)

    def texts(self, texts: Sequence[str]) -> None:
        self.output_count = len(texts)
        self.preview = preview_texts(texts)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def skip(self, reason: str) -> None:
        self.status = StageStatus.SKIPPED
        self.warnings.append(reason)


class StageObserver(Protocol):
    """Told when each stage starts and ends (the lifecycle hooks, gateway/hooks/)."""

    def stage_started(self, name: str, phase: Phase, input_count: int) -> None: ...

    def stage_ended(self, stage: StageTrace) -> None: ...


class TraceRecorder:
    """Collects stage records for one request; `stage()` also opens a child span."""

    def __init__(self, tracer: otel.Tracer | None = None) -> None:
        self._tracer = tracer or otel.get_tracer("gateway")
        self.observer: StageObserver | None = None
        self._stages: list[StageTrace] = []
        self._warnings: list[str] = []
        self._started = time.perf_counter()

    @contextmanager
    def stage(self, name: str, phase: Phase, input_count: int = 0) -> Iterator[StageHandle]:
        handle = StageHandle(input_count)
        started = time.perf_counter()
        with private_span(self._tracer, f"gateway.{phase.value}.{name}") as span:
            span.set_attribute("gateway.stage", name)
            span.set_attribute("gateway.phase", phase.value)
            if self.observer is not None:
                self.observer.stage_started(name, phase, input_count)
            try:
                yield handle
            except BaseException:
                handle.status = StageStatus.FAILED
                raise
            finally:
                duration = (time.perf_counter() - started) * 1000
                span.set_attribute("gateway.input_count", handle.input_count)
                span.set_attribute("gateway.output_count", handle.output_count)
                span.set_attribute("gateway.status", handle.status.value)
                span.set_attribute("gateway.warning_count", len(handle.warnings))
                if handle.status is StageStatus.FAILED:
                    span.set_status(Status(StatusCode.ERROR, "stage failed"))
                record = StageTrace(
                    name=name, phase=phase, status=handle.status, duration_ms=round(duration, 3),
                    input_count=handle.input_count, output_count=handle.output_count,
                    warnings=tuple(handle.warnings), preview=handle.preview, detail=dict(handle.detail))
                self._stages.append(record)
                if self.observer is not None:
                    self.observer.stage_ended(record)

    def warn(self, message: str) -> None:
        self._warnings.append(message)

    @property
    def stages(self) -> tuple[StageTrace, ...]:
        """The stages recorded so far."""
        return tuple(self._stages)

    def finish(self) -> Trace:
        context = otel.get_current_span().get_span_context()
        trace_id = format(context.trace_id, "032x") if context.is_valid else ""
        return Trace(trace_id=trace_id, duration_ms=round((time.perf_counter() - self._started) * 1000, 3),
                     stages=tuple(self._stages), warnings=tuple(self._warnings))
