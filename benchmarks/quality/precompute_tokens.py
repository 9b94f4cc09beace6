"""Precompute MiniLM contextual token vectors for every SciFact doc, as the gateway indexes it.

Doc text = the gateway's index_text: f"{title}\\n{chunk}" where chunk is chunk_text(doc.text) with
the scifact collection's chunking (one chunk per abstract; checked). Tokenised with the bundled
tokenizer (truncation --max-tokens, default 256 = bundled.MAX_TOKENS), sorted by length, run in
batches of 16 through BundledEmbedder._run, each token vector L2-normalised, stored float16.
[CLS] and [SEP] are kept in the store (first and last row of each doc) so they can be dropped later.

Output: tokens_<max>.npz with vecs (total_tokens, 384) float16, offsets (n+1,), ids (n,), plus
stats json.
  python benchmarks/quality/precompute_tokens.py [--max-tokens 256] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from gateway.embedding.bundled import BundledEmbedder
from gateway.ingest.chunker import chunk_text
from gateway.ingest.loaders import load_jsonl
from gateway.tenancy.loader import load_tenants
from mslib import EXP, scifact_dir



def index_texts() -> tuple[list[str], list[str]]:
    tenants = load_tenants(Path("docs/examples"))
    chunking = tenants["scifact"].namespaces["beir"].collections["scifact"].chunking
    ids, texts = [], []
    multi = 0
    for doc in load_jsonl(scifact_dir() / "corpus.jsonl"):
        children = chunk_text(doc.text, chunking).children
        multi += len(children) > 1
        chunk = children[0].text if children else ""
        ids.append(doc.source_id)
        texts.append(f"{doc.title}\n{chunk}" if doc.title else chunk)
    print(f"{len(ids)} docs, {multi} with more than one chunk")
    return ids, texts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()

    ids, texts = index_texts()
    emb = BundledEmbedder(batch_size=args.batch, threads=args.threads)
    emb._tokenizer.enable_truncation(max_length=args.max_tokens)
    t_start = time.perf_counter()
    enc = emb._tokenizer.encode_batch(texts)
    t_tok = time.perf_counter() - t_start
    lengths = np.array([len(e.ids) for e in enc])
    order = np.argsort(lengths, kind="stable")
    per_doc: list[np.ndarray | None] = [None] * len(ids)
    t0 = time.perf_counter()
    for start in range(0, len(order), args.batch):
        batch = order[start:start + args.batch]
        hidden, mask = emb._run([enc[i].ids for i in batch])
        for row, i in enumerate(batch):
            v = hidden[row, :lengths[i]].astype(np.float32)
            v /= np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)
            per_doc[i] = v.astype(np.float16)
        if start // args.batch % 50 == 0:
            print(f"{start}/{len(order)} {time.perf_counter() - t0:.1f}s", flush=True)
    t_model = time.perf_counter() - t0
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)
    vecs = np.concatenate(per_doc)
    np.savez(EXP / f"tokens_{args.max_tokens}.npz", vecs=vecs, offsets=offsets, ids=np.array(ids))
    inner = lengths - 2  # without [CLS]/[SEP]
    stats = {
        "max_tokens": args.max_tokens, "docs": len(ids), "threads": args.threads, "batch": args.batch,
        "tokenize_s": round(t_tok, 2), "model_s": round(t_model, 2),
        "docs_per_s": round(len(ids) / t_model, 1),
        "tokens_per_doc_incl_cls_sep": {"mean": float(lengths.mean()), "p50": float(np.percentile(lengths, 50)),
                                        "p95": float(np.percentile(lengths, 95)), "max": int(lengths.max())},
        "tokens_per_doc_no_cls_sep": {"mean": float(inner.mean()), "p50": float(np.percentile(inner, 50)),
                                      "p95": float(np.percentile(inner, 95))},
        "truncated_docs": int((lengths >= args.max_tokens).sum()),
        "bytes_per_doc_f16_no_cls_sep": float(inner.mean() * 384 * 2),
        "bytes_per_doc_f16_incl": float(lengths.mean() * 384 * 2),
        "total_bytes_f16_no_cls_sep": int(inner.sum() * 384 * 2),
        "total_bytes_f16_incl": int(vecs.nbytes),
    }
    (EXP / f"tokens_{args.max_tokens}_stats.json").write_text(json.dumps(stats, indent=1))
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
