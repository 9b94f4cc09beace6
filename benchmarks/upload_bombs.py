"""A bomb upload's effect on the same tenant's readers: reader latency before and during the job.

Starts `gateway serve` on loopback over a fresh milvus-lite file with the demo tenants (no demo
corpus) and the default upload budgets. acme's reader sends sequential `{ collections { name } }`
requests: `--reads` of them alone, then while acme's writer runs one ingest job of the issue 27
bombs (a 103 KB PDF inflating to 70 MB, 300 pages sharing one 2 MB stream, HTML 20,000 deep)
and `--slow` PDFs whose text extraction takes longer than the CPU-time budget. The start is
sent from a thread; "during" lasts until the job is over or `--during-s` seconds have passed.
Prints one JSON line per phase, the start's own latency and the job's end.

    python benchmarks/upload_bombs.py --reads 100 --slow 3
    python benchmarks/upload_bombs.py --tree /path/to/other/checkout   # the same against other code
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, free_port, percentile, start_gateway  # noqa: E402

READ = "{ collections { name } }"
START = """mutation($files: [FileInput!]) { startIngestJob(namespace: "support", collection: "docs", files: $files) {
  id } }"""
JOB = "query($id: ID!) { job(id: $id) { state done total errors } }"


def pdf(pages: int, content: bytes) -> bytes:
    """`pages` pages sharing one Flate-compressed content stream (tests/documents.py builds the same)."""
    compressed = zlib.compress(content, 9)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{' '.join(f'{5 + i} 0 R' for i in range(pages))}] /Count {pages} >>".encode(),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(compressed) + compressed + b"\nendstream"]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                b"/Contents 4 0 R >>"] * pages
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def operators(count: int) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td " + b"(x) Tj " * count + b"ET"


def bombs(slow: int) -> list[dict]:
    files = {"flate-bomb.pdf": pdf(1, operators(10_000_000)), "shared-stream.pdf": pdf(300, operators(300_000)),
             "deep.html": ("<html><body>" + "<div>word " * 20_000 + "</div>" * 20_000 + "</body></html>").encode()}
    files.update({f"slow-{i}.pdf": pdf(1, operators(1_500_000 + i)) for i in range(slow)})
    return [{"name": name, "contentBase64": base64.b64encode(data).decode()} for name, data in files.items()]


def phase(name: str, latencies: list[float], failures: dict[str, int], seconds: float) -> dict:
    ms = [x * 1000 for x in latencies]
    return {"phase": name, "reads": len(ms), "failed": failures, "seconds": round(seconds, 1),
            "p50_ms": round(percentile(ms, 0.5), 1), "p95_ms": round(percentile(ms, 0.95), 1),
            "max_ms": round(max(ms), 1) if ms else None}


def read(client: httpx.Client, url: str, latencies: list[float], failures: dict[str, int]) -> None:
    began = time.perf_counter()
    try:
        answer = client.post(url, json={"query": READ})
    except httpx.HTTPError as exc:
        failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
        return
    if answer.status_code != 200 or "errors" in answer.json():
        failures[str(answer.status_code)] = failures.get(str(answer.status_code), 0) + 1
        return
    latencies.append(time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=100, help="reads alone, before the job")
    parser.add_argument("--slow", type=int, default=3, help="PDFs over the CPU-time budget in the job")
    parser.add_argument("--during-s", type=float, default=120.0, help="longest 'during' phase")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="a read's client timeout")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose gateway is served")
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}/graphql"
    with tempfile.TemporaryDirectory() as data_dir:
        env = {"GATEWAY_MILVUS_URI": str(Path(data_dir) / "gateway.db"), "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"),
               "GATEWAY_INGEST_DEMO_ON_START": "false",
               "PYTHONPATH": os.pathsep.join([str(args.tree.resolve()), os.environ.get("PYTHONPATH", "")])}
        server = start_gateway(env, port)
        reader = httpx.Client(timeout=args.timeout_s, headers={"Authorization": "Bearer demo-acme-reader"})
        writer = httpx.Client(timeout=600, headers={"Authorization": "Bearer demo-acme-writer"})
        try:
            for _ in range(5):  # warm-up
                read(reader, url, [], {})
            latencies: list[float] = []
            failures: dict[str, int] = {}
            began = time.perf_counter()
            for _ in range(args.reads):
                read(reader, url, latencies, failures)
            print(json.dumps(phase("before", latencies, failures, time.perf_counter() - began)), flush=True)

            files = bombs(args.slow)
            started: dict = {}

            def start() -> None:
                sent = time.perf_counter()
                body = writer.post(url, json={"query": START, "variables": {"files": files}}).json()
                started.update(body=body, seconds=time.perf_counter() - sent)

            starter = threading.Thread(target=start, daemon=True)
            latencies, failures = [], {}
            began = time.perf_counter()
            starter.start()
            job: dict = {}
            while time.perf_counter() - began < args.during_s:
                read(reader, url, latencies, failures)
                if "body" in started and started["body"].get("data"):
                    job_id = started["body"]["data"]["startIngestJob"]["id"]
                    job = writer.post(url, json={"query": JOB, "variables": {"id": job_id}}).json()["data"]["job"]
                    if job["state"] in ("SUCCEEDED", "FAILED"):
                        break
            print(json.dumps(phase("during", latencies, failures, time.perf_counter() - began)), flush=True)
            print(json.dumps({"start_s": round(started.get("seconds", float("nan")), 3),
                              "start_errors": (started.get("body") or {}).get("errors"),
                              "job_state": job.get("state"), "job_done": f"{job.get('done')}/{job.get('total')}",
                              "job_errors": [e.split(";")[0] for e in job.get("errors", [])]}), flush=True)
        finally:
            reader.close()
            writer.close()
            server.terminate()
            try:
                server.wait(timeout=60)
            except Exception:
                server.kill()


if __name__ == "__main__":
    main()
