"""The retrieval pipeline: query stages, fan-out over planned queries, then hit stages.

The pipeline wraps any base search (one collection, routed or federated) given as a function
of a planned query, so the `Retriever` contract is unchanged. Every stage runs inside a trace
stage (and so an OpenTelemetry span); a stage with `on_error: skip` that fails is recorded as
skipped with its reason, never hidden.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

from gateway.admission.deadline import check_deadline, step_done
from gateway.admission.scheduler import fan_out
from gateway.errors import DeadlineExceeded, GatewayError
from gateway.retrieval.hit import Hit, QueryMatch, SignalScore
from gateway.retrieval.options import Mode
from gateway.retrieval.trace import Phase, StageHandle, TraceRecorder
from gateway.storage.analyzer import Language
from gateway.storage.filters import FilterNode, compile_filter
from gateway.tenancy.pipelines import OnError


@dataclass(frozen=True, slots=True)
class PlannedQuery:
    """One query the base search runs. `kind`: original, planner, paraphrase or hyde.

    `filter` is combined (and) with the request's own filter; `mode`, when set, overrides the
    collection's retrieval mode for this query (a planner's keyword sub-query, say).
    """

    text: str
    kind: str = "original"
    weight: float = 1.0
    filter: FilterNode | None = None
    mode: Mode | None = None


@dataclass(frozen=True, slots=True)
class StageRequest:
    """What stages know about the request."""

    question: str
    limit: int
    max_query_chars: int = 2000
    # Metadata keys every target collection declares: what a planned filter may use.
    metadata_fields: frozenset[str] = frozenset()
    # The request's own filter: a stage that fetches more rows (expand) must respect it too.
    filter: FilterNode | None = None
    # Filters the caller is held to in some collections, by (namespace, collection): a key bound to
    # a user sees only that user's rows of a memory collection. A stage that fetches rows adds them.
    scope_filters: Mapping[tuple[str, str], FilterNode] = field(default_factory=dict)
    # Each target collection's BM25 language, by (namespace, collection): a stage that matches the
    # question's words against a hit's (compress) reads both in the hit's language.
    languages: Mapping[tuple[str, str], Language] = field(default_factory=dict)

    def check_filter(self, node: FilterNode) -> None:
        """Raises InvalidFilter when the filter names a field the target collections lack."""
        compile_filter(node, self.metadata_fields)


class QueryStage(Protocol):
    name: str
    on_error: OnError

    async def plan(self, request: StageRequest, queries: list[PlannedQuery],
                   handle: StageHandle) -> list[PlannedQuery]: ...


class HitStage(Protocol):
    name: str
    on_error: OnError
    # How many hits the stage wants from retrieval (0: it works on whatever it gets).
    depth: int

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]: ...


BaseSearch = Callable[[PlannedQuery, int], Awaitable[list[Hit]]]


class Pipeline:
    """A named, validated sequence of stages, built once at start-up."""

    def __init__(self, name: str, query_stages: Sequence[QueryStage], hit_stages: Sequence[HitStage],
                 rrf_k: int = 60) -> None:
        self.name = name
        self.query_stages = tuple(query_stages)
        self.hit_stages = tuple(hit_stages)
        self._rrf_k = rrf_k

    def depth(self, limit: int) -> int:
        """Hits to fetch per planned query: enough for the deepest hit stage, at least `limit`."""
        return max([limit, *(stage.depth for stage in self.hit_stages)])

    async def run(self, request: StageRequest, base: BaseSearch, recorder: TraceRecorder) -> list[Hit]:
        queries = [PlannedQuery(request.question)]
        for stage in self.query_stages:
            check_deadline(f"query stage {stage.name!r}")
            with recorder.stage(stage.name, Phase.QUERY, input_count=len(queries)) as handle:
                with _on_error(stage.on_error, handle):
                    queries = await stage.plan(request, queries, handle)
                handle.texts([f"{q.kind}: {q.text}" for q in queries])
            step_done(stage.name)
        depth = self.depth(request.limit)
        check_deadline("retrieval")
        if len(queries) == 1:
            hits = await base(queries[0], depth)
        else:
            with recorder.stage("fanout", Phase.RETRIEVE, input_count=len(queries)) as handle:
                results = await fan_out(*(base(query, depth) for query in queries))
                hits = merge_queries(list(zip(queries, results)), k=self._rrf_k)
                handle.detail["queries"] = len(queries)
                handle.hits(hits)
        step_done(f"retrieval ({len(hits)} hits)")
        for stage in self.hit_stages:
            check_deadline(f"hit stage {stage.name!r}")
            with recorder.stage(stage.name, Phase.HITS, input_count=len(hits)) as handle:
                with _on_error(stage.on_error, handle):
                    hits = await stage.apply(request, hits, handle)
                handle.hits(hits)
            step_done(stage.name)
        return hits[:request.limit]


@contextmanager
def _on_error(policy: OnError, handle: StageHandle) -> Iterator[None]:
    """`skip`: a stage's expected failure becomes a recorded skip; `fail`: it propagates."""
    try:
        yield
    except GatewayError as exc:
        if policy is not OnError.SKIP or isinstance(exc, DeadlineExceeded):
            raise  # a request past its deadline stops; skipping would only run the next stage
        handle.skip(f"skipped (on_error: skip): {exc.message}")


def merge_queries(results: Sequence[tuple[PlannedQuery, Sequence[Hit]]], k: int = 60) -> list[Hit]:
    """RRF across planned queries, collapsing duplicates by (namespace, source_id, chunk_id).

    A merged hit is the copy with the highest score; each signal keeps its maximum raw score
    (and that copy's rank); `score` becomes `sum_q weight_q / (k + rank_q)`, and provenance
    lists every query the hit matched with its rank and score there.
    """
    fused: dict[tuple[str, str, str], float] = {}
    best: dict[tuple[str, str, str], Hit] = {}
    matches: dict[tuple[str, str, str], list[QueryMatch]] = {}
    signals: dict[tuple[str, str, str], dict[str, SignalScore]] = {}
    for query, hits in results:
        for rank, hit in enumerate(hits, start=1):
            key = hit.key
            fused[key] = fused.get(key, 0.0) + query.weight / (k + rank)
            if key not in best or hit.score > best[key].score:
                best[key] = hit
            matches.setdefault(key, []).append(QueryMatch(query.text, query.kind, rank, hit.score))
            kept = signals.setdefault(key, {})
            for signal in hit.provenance.scores:
                if signal.signal not in kept or signal.raw > kept[signal.signal].raw:
                    kept[signal.signal] = signal
    merged = []
    for key, hit in best.items():
        provenance = replace(hit.provenance, scores=tuple(signals[key].values()), fused_score=fused[key],
                             matched_queries=tuple(dict.fromkeys(m.query for m in matches[key])),
                             query_matches=tuple(matches[key]))
        merged.append(replace(hit, score=fused[key], provenance=provenance))
    merged.sort(key=lambda h: (-h.score, h.id))
    return merged
