"""A request's own fan-out: one search against a multiQuery pipeline's four planned queries, with
a slow embedder, so that the time is the embedder's and the question is whether the four run
side by side (each borrowing an idle request worker) or one after another.

Starts a loopback OpenAI-compatible server (`/embeddings` sleeps `--embed-ms` per call and
returns deterministic unit vectors; `/chat/completions` answers the multiQuery stage with three
phrasings at once), a `gateway serve` whose embedder is that server, one tenant with a dense
collection of a few documents and a `multi` pipeline (multiQuery, count 3, keeping the original:
four queries). Then, interleaved, `--rounds` searches without a pipeline and with it, each a new
query text (no query-vector cache hit), and prints the p50 of each and their ratio.

    python benchmarks/fan_out.py --embed-ms 1500 --rounds 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port, start_gateway  # noqa: E402

DIM = 64
KEY = "fan-out-bench-writer"
TENANT = """id: fan
api_keys:
  - {{sha256: "{digest}", role: writer}}
llm: {{base_url: "{url}", model: bench}}
namespaces:
  docs:
    collections:
      faq: {{trust_tier: first-party, mode: dense}}
pipelines:
  multi:
    stages:
      - multiQuery: {{count: 3}}
"""
DOCUMENTS = [f"Document {i} about refunds, invoices, storage and replication, part {i}." for i in range(8)]
SEARCH = 'query($q: String!, $p: String) { search(input: {query: $q, collection: "faq", limit: 5, pipeline: $p}) { hits { score } } }'


def vector(text: str) -> list[float]:
    raw = hashlib.sha256(text.encode()).digest() * (DIM // 32)
    values = [b / 255 - 0.5 for b in raw[:DIM]]
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


def model_server(embed_s: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path.endswith("/embeddings"):
                time.sleep(embed_s)
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                answer = {"data": [{"index": i, "embedding": vector(t)} for i, t in enumerate(texts)]}
            else:
                question = body["messages"][-1]["content"][-40:]
                phrasings = [f"{question} ({word})" for word in ("put another way", "in other words", "rephrased")]
                answer = {"choices": [{"message": {"content": json.dumps({"queries": phrasings})}}]}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embed-ms", type=float, default=1500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--env", action="append", default=[], help="extra GATEWAY_*=value for the server")
    args = parser.parse_args()
    models = model_server(args.embed_ms / 1000)
    url = f"http://127.0.0.1:{models.server_address[1]}/v1"
    work = Path(tempfile.mkdtemp(prefix="gateway-fan-out-"))
    (work / "tenants").mkdir()
    (work / "tenants" / "fan.yaml").write_text(TENANT.format(digest=hashlib.sha256(KEY.encode()).hexdigest(), url=url))
    port = free_port()
    env = {"GATEWAY_TENANTS_DIR": str(work / "tenants"), "GATEWAY_MILVUS_URI": str(work / "store.db"),
           "GATEWAY_INGEST_DEMO_ON_START": "false", "GATEWAY_EMBEDDER": "openai", "GATEWAY_EMBEDDING_URL": url,
           "GATEWAY_EMBEDDING_MODEL": "bench", "GATEWAY_EMBEDDING_DIM": str(DIM),
           "GATEWAY_EMBEDDING_TIMEOUT_S": "60", **dict(item.split("=", 1) for item in args.env)}
    server = start_gateway(env, port)
    endpoint = f"http://127.0.0.1:{port}/graphql"
    headers = {"Authorization": f"Bearer {KEY}"}
    try:
        with httpx.Client(timeout=120, headers=headers) as client:
            written = client.post(endpoint, json={"query": "mutation($d: [DocumentInput!]!) { upsertDocuments("
                                                           'namespace: "docs", collection: "faq", documents: $d) '
                                                           "{ chunksWritten } }",
                                                  "variables": {"d": [{"sourceId": f"d{i}", "text": t}
                                                                      for i, t in enumerate(DOCUMENTS)]}}).json()
            assert "errors" not in written, written
            times: dict[str, list[float]] = {"one query": [], "four planned queries": []}
            for round_ in range(args.rounds):
                for label, pipeline in (("one query", None), ("four planned queries", "multi")):
                    started = time.perf_counter()
                    answer = client.post(endpoint, json={"query": SEARCH, "variables": {
                        "q": f"how do refunds work, round {round_} {label}", "p": pipeline}}).json()
                    assert "errors" not in answer, answer
                    times[label].append(time.perf_counter() - started)
    finally:
        server.terminate()
        server.wait(timeout=60)
        models.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    one, four = (statistics.median(times[k]) for k in ("one query", "four planned queries"))
    print(f"embedder {args.embed_ms:.0f} ms a call, {args.rounds} rounds interleaved:")
    print(f"  one query             p50 {one:6.2f} s")
    print(f"  four planned queries  p50 {four:6.2f} s  ({four / one:.2f}x one query)")


if __name__ == "__main__":
    main()
