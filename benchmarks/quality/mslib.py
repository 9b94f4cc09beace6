"""Shared pieces for the offline MaxSim experiments: data, token stores, MaxSim, fusion, scoring."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytrec_eval

from gateway.retrieval.evaluation import load_qrels, load_queries

# Intermediate files (candidates, token vectors, scores) go here.
EXP = Path(os.environ.get("LI_WORKDIR", "data/quality"))


def scifact_dir() -> Path:
    """The BEIR SciFact folder, from SCIFACT_DIR; there is no default, since the data is not in the repository."""
    value = os.environ.get("SCIFACT_DIR")
    if not value:
        raise SystemExit("set SCIFACT_DIR to the BEIR SciFact folder (corpus.jsonl, queries.jsonl, qrels/test.tsv); "
                         "docs/benchmarks.md says where to get it")
    path = Path(value)
    missing = [name for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv") if not (path / name).is_file()]
    if missing:
        raise SystemExit(f"SCIFACT_DIR={value!r} has no {', '.join(missing)}; it must be the BEIR SciFact folder")
    return path


@lru_cache(maxsize=1)
def candidates() -> dict:
    return json.loads((EXP / "candidates.json").read_text())["queries"]


@lru_cache(maxsize=1)
def qrels() -> dict:
    return load_qrels(scifact_dir() / "qrels/test.tsv")


@lru_cache(maxsize=1)
def queries() -> dict:
    return load_queries(scifact_dir() / "queries.jsonl")


class TokenStore:
    """Per-doc token vectors (float16, L2-normalised, [CLS] first row and [SEP] last row kept)."""

    def __init__(self, path: Path) -> None:
        z = np.load(path)
        self.vecs = z["vecs"]
        self.off = z["offsets"]
        self.index = {str(d): i for i, d in enumerate(z["ids"])}

    def rows(self, doc_id: str, special: str) -> tuple[int, int]:
        i = self.index[doc_id]
        a, b = int(self.off[i]), int(self.off[i + 1])
        if special == "none" and b - a > 2:
            return a + 1, b - 1
        if special == "cls" and b - a > 2:
            return a, b - 1
        return a, b  # "both"

    def gather(self, doc_ids, special: str) -> tuple[np.ndarray, np.ndarray]:
        spans = [self.rows(d, special) for d in doc_ids]
        lens = np.array([b - a for a, b in spans])
        starts = np.zeros(len(spans), dtype=np.int64)
        starts[1:] = np.cumsum(lens)[:-1]
        mat = np.concatenate([self.vecs[a:b] for a, b in spans])
        return mat, starts


def query_special(q: np.ndarray, special: str) -> np.ndarray:
    """q holds [CLS] ... [SEP] rows."""
    if special == "none":
        return q[1:-1] if len(q) > 2 else q
    if special == "cls":
        return q[:-1]
    return q


def maxsim_matrix(q: np.ndarray, store: TokenStore, doc_ids, special_doc: str = "none") -> np.ndarray:
    """(query tokens, docs): max cosine of each query token over each doc's tokens."""
    mat, starts = store.gather(doc_ids, special_doc)
    return np.maximum.reduceat(q @ mat.astype(np.float32).T, starts, axis=1)


def query_token_ids() -> dict[str, list[int]]:
    from gateway.embedding.bundled import model_files
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_files()[1]))
    tok.enable_truncation(max_length=256)
    tok.no_padding()
    return {q: tok.encode(queries()[q]).ids for q in qrels()}


def maxsim(q: np.ndarray, store: TokenStore, doc_ids, special_doc: str = "none",
           reduce: str = "sum") -> np.ndarray:
    """sum (or mean) over query tokens of the max cosine over each doc's tokens."""
    if len(doc_ids) == 0:
        return np.zeros(0, dtype=np.float32)
    mat, starts = store.gather(doc_ids, special_doc)
    sims = q @ mat.astype(np.float32).T          # (nq, total doc tokens)
    best = np.maximum.reduceat(sims, starts, axis=1)  # (nq, K)
    return best.sum(0) if reduce == "sum" else best.mean(0)


# -- query token vectors ---------------------------------------------------------------------

def query_vectors(max_tokens: int = 256) -> dict[str, np.ndarray]:
    """Normalised token vectors incl. [CLS]/[SEP] for every test query, one forward pass each
    (as BundledEmbedder.token_vectors does); cached to qvecs.npz."""
    path = EXP / "qvecs.npz"
    if path.exists():
        z = np.load(path)
        return {k: z[k] for k in z.files}
    from gateway.embedding.bundled import BundledEmbedder

    emb = BundledEmbedder(threads=2)
    out = {}
    for qid in qrels():
        ids = emb._tokenizer.encode(queries()[qid]).ids
        h = emb._run([ids])[0][0].astype(np.float32)
        out[qid] = h / np.clip(np.linalg.norm(h, axis=1, keepdims=True), 1e-12, None)
    np.savez(path, **out)
    return out


# -- fusion helpers -------------------------------------------------------------------------

def minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(), x.max()
    return np.ones_like(x) if hi == lo else (x - lo) / (hi - lo)


def ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, higher score = rank 1 (stable)."""
    order = np.argsort(-x, kind="stable")
    r = np.empty(len(x), dtype=np.int64)
    r[order] = np.arange(1, len(x) + 1)
    return r


def rerank_run(lists: dict[str, list[str]], new_scores: dict[str, np.ndarray], k: int) -> dict:
    """Reorder the first k of each list by new_scores (higher first; stable on the old order),
    keep the rest in the old order. Returns a pytrec_eval run."""
    run = {}
    for qid, ids in lists.items():
        top = ids[:k]
        s = np.asarray(new_scores[qid][:len(top)])
        order = np.argsort(-s, kind="stable")
        ranked = [top[i] for i in order] + ids[k:]
        n = len(ranked)
        run[qid] = {d: float(n - i) for i, d in enumerate(ranked)}
    return run


# -- scoring --------------------------------------------------------------------------------

_EVAL = None


def per_query(run: dict) -> dict[str, dict[str, float]]:
    global _EVAL
    if _EVAL is None:
        _EVAL = pytrec_eval.RelevanceEvaluator(qrels(), {"ndcg_cut.10", "recall.100"})
    return _EVAL.evaluate({q: d for q, d in run.items() if d})


def score(run: dict) -> dict[str, float]:
    res = per_query(run)
    n = len(qrels())
    return {"ndcg@10": sum(res.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels()) / n,
            "recall@100": sum(res.get(q, {}).get("recall_100", 0.0) for q in qrels()) / n}


def ndcg_vector(run: dict) -> np.ndarray:
    res = per_query(run)
    return np.array([res.get(q, {}).get("ndcg_cut_10", 0.0) for q in sorted(qrels())])


def paired(a: np.ndarray, b: np.ndarray, trials: int = 20000, seed: int = 0) -> dict:
    """b - a: mean, wins/losses, two-sided paired randomisation p-value, bootstrap 95% CI."""
    rng = np.random.default_rng(seed)
    d = b - a
    obs = abs(d.mean())
    signs = rng.choice([-1.0, 1.0], size=(trials, len(d)))
    p = float(((np.abs((signs * d).mean(1))) >= obs - 1e-12).mean())
    boots = d[rng.integers(0, len(d), size=(trials, len(d)))].mean(1)
    return {"delta": float(d.mean()), "wins": int((d > 1e-9).sum()), "losses": int((d < -1e-9).sum()),
            "p": p, "ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]}
