"""A real HTTP server on 127.0.0.1 that answers like an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[[str, dict[str, Any]], tuple[int, Any]]


@contextmanager
def loopback_server(handler: Handler) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve `handler(path, json_body) -> (status, json_or_text)`; yields (base URL, requests seen)."""
    seen: list[dict[str, Any]] = []

    class _Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            body = json.loads(raw or b"{}")
            seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization"),
                         "raw": raw, "headers": dict(self.headers)})
            status, payload = handler(self.path, body)
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up first (the timeout tests)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()
