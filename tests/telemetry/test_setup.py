"""OTLP/HTTP export through the standard OTEL_* variables, to a collector on loopback."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from gateway.retrieval.trace import Phase, TraceRecorder
from gateway.telemetry import build_tracer_provider


def collector():
    received: list[tuple[str, str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


def test_spans_are_exported_over_otlp_http_without_text():
    server, received = collector()
    try:
        provider = build_tracer_provider({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
                                          "OTEL_SERVICE_NAME": "gateway-test"})
        recorder = TraceRecorder(provider.get_tracer("gateway"))
        with provider.get_tracer("gateway").start_as_current_span("graphql.request"):
            with recorder.stage("route", Phase.ROUTE) as stage:
                stage.texts(["secret query text"])
            trace = recorder.finish()
        provider.force_flush()
        provider.shutdown()
    finally:
        server.shutdown()
    path, content_type, body = received[0]
    assert path == "/v1/traces" and content_type == "application/x-protobuf"
    request = ExportTraceServiceRequest.FromString(body)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert {s.name for s in spans} == {"graphql.request", "gateway.route.route"}
    assert {s.trace_id.hex() for s in spans} == {trace.trace_id}
    assert b"secret query text" not in body
    stage_span = next(s for s in spans if s.name == "gateway.route.route")
    attributes = {a.key: (a.value.int_value or a.value.string_value) for a in stage_span.attributes}
    assert attributes["gateway.output_count"] == 1 and attributes["gateway.status"] == "ok"


def test_no_endpoint_means_no_exporter_but_spans_still_have_ids():
    provider = build_tracer_provider({})
    with provider.get_tracer("gateway").start_as_current_span("x") as span:
        assert span.get_span_context().is_valid
