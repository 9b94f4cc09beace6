"""The pipeline runner: fan-out merge by RRF, on_error, and the per-stage trace."""

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.errors import UpstreamUnavailable
from gateway.retrieval.llm import ChatClient
from gateway.retrieval.pipeline import Pipeline, PlannedQuery, StageRequest, merge_queries
from gateway.retrieval.stages.abstain import Abstain
from gateway.retrieval.stages.query import MultiQuery
from gateway.retrieval.trace import PREVIEW_CHARS, PREVIEW_ITEMS, Phase, StageStatus, TraceRecorder
from gateway.tenancy.pipelines import AbstainParams, MultiQueryParams
from tests.loopback import loopback_server
from tests.retrieval.stages.hits import make_hit


def test_merge_is_rrf_with_weights_keeping_max_raw_scores_and_matches():
    a, b = PlannedQuery("first"), PlannedQuery("second", "paraphrase", weight=0.5)
    x1, y1 = make_hit("x", 0.9), make_hit("y", 0.8)
    y2, z2 = make_hit("y", 0.95), make_hit("z", 0.7)
    merged = merge_queries([(a, [x1, y1]), (b, [y2, z2])], k=60)
    by_id = {h.source_id: h for h in merged}
    assert by_id["y"].score == pytest.approx(1 / 62 + 0.5 / 61)
    assert by_id["x"].score == pytest.approx(1 / 61)
    assert by_id["z"].score == pytest.approx(0.5 / 62)
    assert [h.source_id for h in merged] == ["y", "x", "z"]
    y = by_id["y"]
    assert y.provenance.scores[0].raw == 0.95  # the maximum raw score across queries
    assert y.provenance.matched_queries == ("first", "second")
    assert [(m.query, m.kind, m.rank, m.score) for m in y.provenance.query_matches] == [
        ("first", "original", 2, 0.8), ("second", "paraphrase", 1, 0.95)]


def test_merge_never_mutates_its_inputs():
    hit = make_hit("x", 0.5)
    merge_queries([(PlannedQuery("q"), [hit]), (PlannedQuery("r"), [hit])])
    assert hit.score == 0.5 and hit.provenance.matched_queries == ()


def recorder_with_spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TraceRecorder(provider.get_tracer("test")), exporter


def answering(payload):
    return lambda path, body: (200, {"choices": [{"message": {"content": json.dumps(payload)}}]})


async def fake_base_factory(calls):
    async def base(query: PlannedQuery, depth: int):
        calls.append((query.text, depth))
        long = "word " * 100
        return [make_hit(f"{query.text}-{i}", 1.0 - i / 10, long) for i in range(8)]
    return base


async def test_fan_out_runs_each_planned_query_and_traces_every_stage():
    calls = []
    base = await fake_base_factory(calls)
    recorder, exporter = recorder_with_spans()
    with loopback_server(answering({"queries": ["alpha", "beta"]})) as (url, _):
        pipeline = Pipeline("deep", [MultiQuery(MultiQueryParams(), ChatClient(url, "m"))],
                            [Abstain(AbstainParams(threshold=0.0))])
        hits = await pipeline.run(StageRequest("question", limit=3), base, recorder)
    assert sorted(calls) == [("alpha", 3), ("beta", 3), ("question", 3)]
    assert len(hits) == 3
    trace = recorder.finish()
    assert [(s.name, s.phase, s.status) for s in trace.stages] == [
        ("multiQuery", Phase.QUERY, StageStatus.OK), ("fanout", Phase.RETRIEVE, StageStatus.OK),
        ("abstain", Phase.HITS, StageStatus.OK)]
    multi, fanout, _ = trace.stages
    assert (multi.input_count, multi.output_count) == (1, 3)
    assert (fanout.input_count, fanout.output_count) == (3, 24)
    assert len(fanout.preview) == PREVIEW_ITEMS and all(len(p) <= PREVIEW_CHARS + 40 for p in fanout.preview)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    span = spans["gateway.query.multiQuery"]
    assert span.attributes["gateway.status"] == "ok" and span.attributes["gateway.output_count"] == 3
    # Spans carry counts and status only, never query text or content.
    assert not any("alpha" in str(v) or "question" in str(v) for s in spans.values() for v in s.attributes.values())


async def test_on_error_skip_records_the_skip_and_searches_the_original():
    calls = []
    base = await fake_base_factory(calls)
    recorder, _ = recorder_with_spans()
    with loopback_server(answering("not an object")) as (url, _):
        pipeline = Pipeline("p", [MultiQuery(MultiQueryParams.model_validate({"on_error": "skip"}), ChatClient(url, "m"))], [])
        hits = await pipeline.run(StageRequest("question", limit=2), base, recorder)
    assert calls == [("question", 2)] and len(hits) == 2
    stage = recorder.finish().stages[0]
    assert stage.status is StageStatus.SKIPPED and stage.output_count == 1
    assert "skipped (on_error: skip)" in stage.warnings[0] and "answered JSON str" in stage.warnings[0]


async def test_on_error_fail_fails_the_request_and_marks_the_stage():
    calls = []
    base = await fake_base_factory(calls)
    recorder, exporter = recorder_with_spans()
    with loopback_server(lambda path, body: (500, {"error": "boom"})) as (url, _):
        pipeline = Pipeline("p", [MultiQuery(MultiQueryParams(), ChatClient(url, "m"))], [])
        with pytest.raises(UpstreamUnavailable, match="HTTP 500"):
            await pipeline.run(StageRequest("question", limit=2), base, recorder)
    assert calls == []
    assert recorder.finish().stages[0].status is StageStatus.FAILED
    assert exporter.get_finished_spans()[0].attributes["gateway.status"] == "failed"


def test_depth_is_the_deepest_hit_stage_or_the_limit():
    class Deep:
        depth = 40

    assert Pipeline("p", [], [Deep()]).depth(10) == 40
    assert Pipeline("p", [], [Deep()]).depth(50) == 50


def test_planned_queries_search_side_by_side_on_request_workers():
    """A request's planned queries are its own fan-out: on a request worker, their blocking calls
    (embedding, Milvus) borrow idle workers instead of running one after another."""
    import threading

    from gateway.admission.asgi import _on_worker
    from gateway.admission.scheduler import offload
    from gateway.admission.workers import LEND_RESERVE, RequestWorkers

    together = threading.Barrier(3, timeout=10)  # broken unless the three queries block at once

    async def base(query: PlannedQuery, depth: int):
        await offload(together.wait)
        return [make_hit(f"{query.text}-{i}", 1.0 - i / 10) for i in range(3)]

    workers = RequestWorkers(1 + LEND_RESERVE + 3)
    try:
        with loopback_server(answering({"queries": ["alpha", "beta"]})) as (url, _):
            pipeline = Pipeline("deep", [MultiQuery(MultiQueryParams(), ChatClient(url, "m"))], [])
            run = pipeline.run(StageRequest("question", limit=3), base, TraceRecorder(None))
            hits = workers.submit("acme", 1, _on_worker("acme", run, workers.lend)).result(timeout=30)
    finally:
        workers.shutdown()
    assert len(hits) == 3
