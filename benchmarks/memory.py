"""What a served gateway holds in memory, per process, and what each part of it costs.

Two measurements, each in fresh processes:

  serve    `gateway serve --workers N` on a temporary store with the demo tenants (seeded on
           start), plus one pipeline of the bundled rerankers (`crossEncoder`, `colbert`). Every
           process of the server (the supervising parent, each worker, the milvus-lite server
           child) is read from /proc after start, after one plain search, after one `evidence`
           pipeline search (lateInteraction) and after one search through both rerankers.
           RSS counts shared pages in every process that maps them; PSS splits them between the
           processes; USS is the private pages alone (what ending the process gives back).
  parts    one Python process that imports and builds the parts one after another, with the
           growth of its USS after each: the gateway's imports, the GraphQL schema, the
           embedder, the cross-encoder, the ColBERT model, the image encoder.

    python benchmarks/memory.py                   # both, with --workers 1 and 2
    python benchmarks/memory.py --only parts
    python benchmarks/memory.py --only serve --workers 2

Prints Markdown tables (MiB). Loopback only; the temporary store is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, free_port, process_tree  # noqa: E402

READER = "demo-acme-reader"
QUESTION = "How do refunds work?"
# Appended to the copied acme tenant file: one pipeline through both bundled rerankers.
RERANKERS = """
  rerankers:
    description: Hybrid, then colbert and crossEncoder over the top 10 (benchmarks/memory.py)
    stages:
      - rerank: {chain: [{colbert: {topK: 10}}, {crossEncoder: {topK: 10}}]}
"""
PHASES = ("started", "one search", "evidence pipeline", "rerankers pipeline")


@dataclass(frozen=True)
class Reading:
    """One process's memory, in KiB, from /proc/<pid>/status and smaps_rollup."""

    rss: int
    pss: int
    uss: int


def reading(pid: int) -> Reading:
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0])
    return Reading(rss=fields["Rss"], pss=fields["Pss"],
                   uss=fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0))


def role(pid: int, root: int) -> str:
    if pid == root:
        return "serve (parent)"
    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    if "gateway.storage.server" in command or "milvus" in command:
        return "milvus-lite server"
    if "resource_tracker" in command:
        return "resource tracker"
    if "spawn_main" in command:
        return "worker"
    return command[:40]


def snapshot(root: int) -> dict[str, Reading]:
    """Each process of the server by role (workers numbered in pid order)."""
    out: dict[str, Reading] = {}
    workers = 0
    for pid in [root, *sorted(process_tree(root)[1:])]:
        try:
            name = role(pid, root)
            value = reading(pid)
        except (OSError, KeyError):
            continue  # gone between the listing and the read
        if name == "worker":
            workers += 1
            name = f"worker {workers}"
        out[name] = value
    return out


def search(url: str, pipeline: str | None) -> None:
    argument = f', pipeline: "{pipeline}"' if pipeline else ""
    query = (f'{{ search(input: {{query: "{QUESTION}", collection: "docs", limit: 5{argument}}}) '
             "{ hits { score } } }")
    answer = httpx.post(f"{url}/graphql", json={"query": query}, timeout=120,
                        headers={"Authorization": f"Bearer {READER}"}).json()
    if answer.get("errors"):
        raise SystemExit(f"search ({pipeline or 'plain'}) failed: {answer['errors']}")


def serve(workers: int) -> dict[str, dict[str, Reading]]:
    """The readings of every process of `gateway serve --workers N`, per phase."""
    work = Path(tempfile.mkdtemp(prefix="gateway-memory-"))
    try:
        tenants = work / "tenants"
        shutil.copytree(ROOT / "tenants", tenants)
        with (tenants / "acme.yaml").open("a") as handle:
            handle.write(RERANKERS)
        port = free_port()
        env = {**os.environ, "GATEWAY_TENANTS_DIR": str(tenants), "GATEWAY_MILVUS_URI": str(work / "gateway.db"),
               "GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": str(port)}
        log = (work / "serve.log").open("w")
        process = subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve", "--workers", str(workers)],
                                   env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, process, work / "serve.log")
            time.sleep(2)  # start-up's last allocations settle
            phases = {"started": snapshot(process.pid)}
            # With N workers a request lands on any one of them: send each phase's query N times
            # so that, most likely, every worker has answered one.
            for phase, pipeline in zip(PHASES[1:], (None, "evidence", "rerankers")):
                for _ in range(workers * 2 - 1):
                    search(url, pipeline)
                phases[phase] = snapshot(process.pid)
            return phases
        finally:
            process.terminate()
            process.wait(timeout=60)
            log.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _wait_ready(url: str, process: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gateway serve exited with {process.returncode}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"gateway at {url} did not become ready in {timeout:.0f} s")


# Run in a fresh interpreter: each step's growth of USS, in KiB, one "name<TAB>KiB" line per step.
PARTS = r"""
import sys
from pathlib import Path

def uss():
    fields = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0])
    return fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)

last = uss()
print(f"python interpreter\t{last}")

def step(name):
    global last
    now = uss()
    print(f"{name}\t{now - last}", flush=True)
    last = now

import gateway.cli
step("gateway.cli (what `serve` imports to start)")
import gateway.app, gateway.runtime
step("gateway.app and its imports (strawberry, starlette, pymilvus, opentelemetry)")
from gateway.graphql.schema import build_schema
from gateway.settings import Settings
build_schema(Settings())
step("the GraphQL schema, built")
from gateway.embedding.bundled import BundledEmbedder
embedder = BundledEmbedder()
embedder.embed_documents(["warm up"])
embedder.embed_query("warm up")
step("embedder (MiniLM-L6 int8, 2 sessions), one document and one query run")
embedder.embed_documents(["a passage of some length " * 40] * 16)
step("embedder: one 16-passage batch at 256 tokens (onnxruntime arena grows)")
from gateway.retrieval.stages.cross_encoder import CrossEncoderModel
model = CrossEncoderModel()
model.score("how do refunds work", ["a passage of some length " * 40] * 10, 256)
step("crossEncoder (MiniLM-L12 int8), 10 passages scored")
from gateway.retrieval.stages.colbert import ColbertModel
colbert = ColbertModel()
colbert.documents(["a passage of some length " * 40] * 10, 512)
colbert.query("how do refunds work")
step("colbert (answerai-colbert-small int8), 10 passages")
from gateway.embedding.modal import ImageEncoder, image_encoder
from PIL import Image
image_encoder(ImageEncoder.COLOUR_LAYOUT).embed_images([Image.new("RGB", (64, 64))])
step("image encoder (colour-layout) and Pillow")
"""


def parts() -> list[tuple[str, int]]:
    out = subprocess.run([sys.executable, "-c", PARTS], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT).stdout
    return [(name, int(kib)) for name, kib in (line.split("\t") for line in out.splitlines() if "\t" in line)]


def mib(kib: int) -> str:
    return f"{kib / 1024:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("serve", "parts"))
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    if args.only != "serve":
        print("| part | USS added (MiB) |\n|---|---:|")
        for name, kib in parts():
            print(f"| {name} | {mib(kib)} |")
        print()
    if args.only != "parts":
        for workers in args.workers:
            phases = serve(workers)
            print(f"`gateway serve --workers {workers}` (MiB; RSS / PSS / USS)\n")
            print("| process | " + " | ".join(PHASES) + " |\n|---|" + "---:|" * len(PHASES))
            names = list(dict.fromkeys(name for phase in phases.values() for name in phase))
            for name in names:
                cells = [(f"{mib(r.rss)} / {mib(r.pss)} / {mib(r.uss)}" if (r := phases[p].get(name)) else "-")
                         for p in PHASES]
                print(f"| {name} | " + " | ".join(cells) + " |")
            totals = [sum(r.pss for r in phases[p].values()) for p in PHASES]
            print("| **all processes (PSS)** | " + " | ".join(f"**{mib(t)}**" for t in totals) + " |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
