"""Token vectors (as benchmarks/quality/precompute_tokens.py stores them) and, from the same
forward pass, each document's mean-pooled embedding over up to --max-tokens tokens.

  LI_WORKDIR=/path/to/workdir SCIFACT_DIR=$SCIFACT\
    python benchmarks/quality/precompute.py --max-tokens 512

Writes tokens_<T>.npz (vecs float16 L2-normalised per token, offsets, ids) and pooled_<T>.npz (ids,
vecs float32 L2-normalised: what the bundled embedder would return with a <T>-token window).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from precompute_tokens import EXP, index_texts

from gateway.embedding.bundled import BundledEmbedder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    EXP.mkdir(parents=True, exist_ok=True)
    ids, texts = index_texts()
    emb = BundledEmbedder(batch_size=args.batch, threads=2)
    emb._tokenizer.enable_truncation(max_length=args.max_tokens)
    enc = emb._tokenizer.encode_batch(texts)
    lengths = np.array([len(e.ids) for e in enc])
    order = np.argsort(lengths, kind="stable")
    tokens: list[np.ndarray | None] = [None] * len(ids)
    pooled = np.zeros((len(ids), 384), dtype=np.float32)
    started = time.perf_counter()
    for start in range(0, len(order), args.batch):
        batch = order[start:start + args.batch]
        hidden, _ = emb._run([enc[i].ids for i in batch])
        for row, i in enumerate(batch):
            h = hidden[row, :lengths[i]].astype(np.float32)
            mean = h.mean(0)
            pooled[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
            tokens[i] = (h / np.clip(np.linalg.norm(h, axis=1, keepdims=True), 1e-12, None)).astype(np.float16)
        if start // args.batch % 50 == 0:
            print(f"{start}/{len(order)} {time.perf_counter() - started:.1f}s", flush=True)
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)
    np.savez(EXP / f"tokens_{args.max_tokens}.npz", vecs=np.concatenate(tokens), offsets=offsets, ids=np.array(ids))
    np.savez(EXP / f"pooled_{args.max_tokens}.npz", vecs=pooled, ids=np.array(ids))
    print(f"{len(ids)} docs in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
