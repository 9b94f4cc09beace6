"""Cheaper cross-encoder runs? Merging queued requests into one ONNX run, and session threads.

    python benchmarks/quality/ce_batching.py --candidates /tmp/gateway-quality/candidates/fiqa.json

Reads the hybrid top 5 of the first --requests queries from a candidates file of loco.py and scores
them at --tokens tokens with the bundled cross-encoder (the reranker's own CrossEncoderModel),
timing the process's CPU (user + system) per request:

  merged     1, 2, 4 or 8 requests' passages in one session run (what dynamic batching of queued
             reranks would do), the arena released after each run as the reranker does;
  threads    the session at 2 intra-op threads, one run at a time (the gateway's setting), against
             1 thread with two runs at once.

It also says whether the scores stay bit-identical: 1 thread against 2, and a request scored inside
a merged run against the same request scored alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gateway.embedding.bundled import release_arena  # noqa: E402
from gateway.retrieval.stages.cross_encoder import CrossEncoderModel  # noqa: E402

TOP_K = 5


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def merged_run(model: CrossEncoderModel, pairs: list[tuple[list[int], list[int]]]) -> list[float]:
    """One session run over every pair, padded to the longest, as the reranker builds a batch."""
    width = max(len(ids) for ids, _ in pairs)
    ids = np.zeros((len(pairs), width), dtype=np.int64)
    types, mask = np.zeros_like(ids), np.zeros_like(ids)
    for row, (seq, kinds) in enumerate(pairs):
        ids[row, :len(seq)], types[row, :len(seq)], mask[row, :len(seq)] = seq, kinds, 1
    logits = model._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
                                release_arena())[0]
    return [float(x) for x in logits[:, 0]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = list(json.loads(args.candidates.read_text()).values())[:args.requests]
    requests = [(row["query"], [h[2] for h in row["hits"][:TOP_K]]) for row in rows]
    two, one = CrossEncoderModel(threads=2), CrossEncoderModel(threads=1)
    print(f"load average {os.getloadavg()[0]:.1f}; {len(requests)} requests of {TOP_K} passages "
          f"at {args.tokens} tokens")

    alone = [two.score(q, p, args.tokens, 16) for q, p in requests]
    single = [one.score(q, p, args.tokens, 16) for q, p in requests]
    print(f"1 thread == 2 threads, bit for bit: {alone == single}")
    pairs = [two.pairs(q, p, args.tokens) for q, p in requests]
    inside = merged_run(two, pairs[0] + pairs[1])[:TOP_K]
    print(f"request 1 inside a run with request 2 == alone, bit for bit: {inside == alone[0]} "
          f"(largest difference {max(abs(a - b) for a, b in zip(inside, alone[0])):.4f} logits)")

    for round_ in range(1, args.rounds + 1):
        for group in (1, 2, 4, 8):
            started = cpu_seconds()
            for i in range(0, len(pairs), group):
                merged_run(two, [pair for request in pairs[i:i + group] for pair in request])
            print(f"round {round_}: {group} request(s) per run: {1000 * (cpu_seconds() - started) / len(pairs):.1f} "
                  f"ms CPU a request")
        for label, model, at_once in (("2 threads, one run at a time", two, 1), ("1 thread, two runs at once", one, 2)):
            gate = threading.Semaphore(at_once)

            def score(question: str, passages: list[str]) -> None:
                with gate:
                    model.score(question, passages, args.tokens, 16)

            started, wall = cpu_seconds(), time.perf_counter()
            workers = [threading.Thread(target=score, args=request) for request in requests]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            print(f"round {round_}: {label}: {1000 * (cpu_seconds() - started) / len(requests):.1f} ms CPU a request, "
                  f"{1000 * (time.perf_counter() - wall) / len(requests):.1f} ms wall a request")


if __name__ == "__main__":
    main()
