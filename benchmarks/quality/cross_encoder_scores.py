"""Score the hybrid top-K of every SciFact test query with the bundled cross-encoder (issue 11).

Reads candidates.json (benchmarks/quality/dump_candidates.py: the gateway's hybrid top
100 per query) and the corpus; writes ce_<maxTokens>.json, {query id: [logit of each of the first
K candidates]}. Passages are `title\\ncontent`, as the reranker reads a hit. The scores feed
benchmarks/quality/cv.py --cross-encoder.

  LI_WORKDIR=... SCIFACT_DIR=... python benchmarks/quality/cross_encoder_scores.py --top-k 30 --max-tokens 512
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from gateway.retrieval.stages.cross_encoder import CrossEncoderModel
from mslib import EXP, scifact_dir



def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top-k", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    cands = json.loads((EXP / "candidates.json").read_text())["queries"]
    corpus = {}
    with open(scifact_dir() / "corpus.jsonl") as f:
        for line in f:
            record = json.loads(line)
            text = record.get("text") or ""
            corpus[str(record["_id"])] = f"{record['title']}\n{text}" if record.get("title") else text
    model = CrossEncoderModel()
    out_path = EXP / f"ce_{args.max_tokens}.json"
    out = json.loads(out_path.read_text()) if out_path.exists() else {}
    started = time.perf_counter()
    for n, (qid, entry) in enumerate(sorted(cands.items())):
        if len(out.get(qid, [])) >= args.top_k:
            continue
        docs = [row[0] for row in entry["hybrid"][:args.top_k]]
        out[qid] = model.score(entry["query"], [corpus[d] for d in docs], args.max_tokens, args.batch_size)
        if n % 25 == 0:
            out_path.write_text(json.dumps(out))
            print(f"{n} queries, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    out_path.write_text(json.dumps(out))
    print(f"done: {len(out)} queries, {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
