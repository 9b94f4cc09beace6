"""A bomb upload's effect on the same tenant's readers: reader latency before and during the job.

Starts `gateway serve` on loopback over a fresh milvus-lite file with the demo tenants (no demo
corpus) and the default upload budgets. acme's reader sends sequential `{ collections { name } }`
requests: `--reads` of them alone, then while acme's writer starts `--starts` ingest jobs at
once, each of the issue 27 bombs (a 103 KB PDF inflating to 70 MB, 300 pages sharing one 2 MB
stream, HTML 20,000 deep) and `--slow` PDFs whose text extraction takes seconds. The starts are
sent from threads; "during" lasts until every job is over or `--during-s` seconds have passed.
Prints one JSON line per phase, then each start's own latency and its job's end.

    python benchmarks/upload_bombs.py --reads 100 --slow 2 --starts 2
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
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, free_port, percentile, start_gateway  # noqa: E402

# The bombs are built as the tests build them, so the benchmark measures what the tests refuse.
from tests.documents import shared_stream_pdf as pdf, text_operators as operators  # noqa: E402

READ = "{ collections { name } }"
START = """mutation($files: [FileInput!]) { startIngestJob(namespace: "support", collection: "docs", files: $files) {
  id } }"""
JOB = "query($id: ID!) { job(id: $id) { state done total errors } }"


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
    """One read; its latency is kept whatever the answer (a 504 counts the time it took to come)."""
    began = time.perf_counter()
    try:
        answer = client.post(url, json={"query": READ})
        failed = str(answer.status_code) if answer.status_code != 200 or "errors" in answer.json() else None
    except httpx.HTTPError as exc:
        failed = type(exc).__name__
    latencies.append(time.perf_counter() - began)
    if failed:
        failures[failed] = failures.get(failed, 0) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=100, help="reads alone, before the job")
    parser.add_argument("--slow", type=int, default=2, help="slow PDFs in each job")
    parser.add_argument("--starts", type=int, default=2, help="jobs started at once (the per-tenant job cap is 2)")
    parser.add_argument("--during-s", type=float, default=120.0, help="longest 'during' phase")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="a read's client timeout")
    parser.add_argument("--interval-s", type=float, default=0.02,
                        help="pause between reads (the demo tenant's rate limit is 100 requests a second)")
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
                time.sleep(args.interval_s)
            print(json.dumps(phase("before", latencies, failures, time.perf_counter() - began)), flush=True)

            files = bombs(args.slow)
            starts: list[dict] = [{} for _ in range(args.starts)]

            def start(into: dict) -> None:
                sent = time.perf_counter()
                try:
                    into["body"] = writer.post(url, json={"query": START, "variables": {"files": files}}).json()
                except httpx.HTTPError as exc:
                    into["body"] = {"errors": [{"message": type(exc).__name__}]}
                into["seconds"] = time.perf_counter() - sent

            threads = [threading.Thread(target=start, args=(into,), daemon=True) for into in starts]
            latencies, failures = [], {}
            jobs: dict[str, dict] = {}
            began = time.perf_counter()
            for thread in threads:
                thread.start()
            polled = 0.0
            while time.perf_counter() - began < args.during_s:
                read(reader, url, latencies, failures)
                time.sleep(args.interval_s)
                if time.perf_counter() - polled < 0.5:  # the tenant's request rate is shared with the reads
                    continue
                polled = time.perf_counter()
                for into in starts:
                    data = (into.get("body") or {}).get("data")
                    job_id = data["startIngestJob"]["id"] if data else None
                    if job_id and jobs.get(job_id, {}).get("state") not in ("SUCCEEDED", "FAILED"):
                        answer = writer.post(url, json={"query": JOB, "variables": {"id": job_id}}).json()
                        jobs[job_id] = answer["data"]["job"] if answer.get("data") else jobs.get(job_id, {})
                # Over when every job is; a start that made no job (refused, timed out) leaves the
                # phase to its full length, since its parse may still hold the tenant.
                if len(jobs) == len(starts) and all(job.get("state") in ("SUCCEEDED", "FAILED")
                                                    for job in jobs.values()):
                    break
            print(json.dumps(phase("during", latencies, failures, time.perf_counter() - began)), flush=True)
            for into in starts:
                data = (into.get("body") or {}).get("data")
                job = jobs.get(data["startIngestJob"]["id"], {}) if data else {}
                print(json.dumps({"start_s": round(into["seconds"], 3) if "seconds" in into else "no answer yet",
                                  "start_errors": [e["message"][:120] for e in (into.get("body") or {}).get("errors")
                                                   or []],
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
