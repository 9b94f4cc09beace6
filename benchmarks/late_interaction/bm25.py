"""Offline BM25 over the gateway's own analysed index text (k1 1.2, b 0.75, Lucene/Milvus idf),
checked against the raw BM25 scores Milvus returned (candidates.json sparse_all), plus
RM3-style pseudo-relevance feedback. Weighted queries: score(d) = sum_w q_w * bm25(w, d).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from gateway.storage.analyzer import Analyzer


class BM25:
    def __init__(self, ids: list[str], texts: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        an = Analyzer()
        self.an = an
        self.ids = ids
        self.index = {d: i for i, d in enumerate(ids)}
        self.vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        self.doc_terms: list[Counter] = []
        for i, t in enumerate(texts):
            c = Counter(an.terms(t))
            self.doc_terms.append(c)
            for w, n in c.items():
                j = self.vocab.setdefault(w, len(self.vocab))
                rows.append(i); cols.append(j); vals.append(n)
        tf = sp.csr_matrix((vals, (rows, cols)), shape=(len(ids), len(self.vocab)), dtype=np.float64)
        self.dl = np.asarray(tf.sum(1)).ravel()
        self.avgdl = self.dl.mean()
        n = len(ids)
        self.df = np.asarray((tf > 0).sum(0)).ravel()
        self.idf = np.log(1 + (n - self.df + 0.5) / (self.df + 0.5))
        tf = tf.tocoo()
        norm = k1 * (1 - b + b * self.dl[tf.row] / self.avgdl)
        w = self.idf[tf.col] * tf.data * (k1 + 1) / (tf.data + norm)
        self.W = sp.csc_matrix((w, (tf.row, tf.col)), shape=(len(ids), len(self.vocab)))

    def query_weights(self, text: str) -> dict[str, float]:
        # Milvus weights each analysed query term by its count in the query (check_bm25.py).
        return dict(Counter(self.an.terms(text)))

    def score(self, weights: dict[str, float]) -> np.ndarray:
        cols = [self.vocab[w] for w in weights if w in self.vocab]
        if not cols:
            return np.zeros(len(self.ids))
        q = np.array([weights[w] for w in weights if w in self.vocab])
        return np.asarray(self.W[:, cols] @ q).ravel()

    def top(self, weights: dict[str, float], k: int) -> list[tuple[str, float]]:
        s = self.score(weights)
        idx = np.argpartition(-s, min(k, len(s) - 1))[:k]
        idx = idx[np.argsort(-s[idx], kind="stable")]
        return [(self.ids[i], float(s[i])) for i in idx if s[i] > 0]

    def rm3(self, text: str, feedback: list[tuple[str, float]], terms: int, orig_weight: float) -> dict[str, float]:
        """RM3: RM1 term weights from feedback docs (P(w|d) * doc weight), top `terms`,
        normalised, interpolated with the (normalised) original query."""
        orig = self.query_weights(text)
        rm: Counter = Counter()
        total = sum(s for _, s in feedback) or 1.0
        for d, s in feedback:
            c = self.doc_terms[self.index[d]]
            L = sum(c.values())
            for w, n in c.items():
                rm[w] += (n / L) * (s / total)
        top = rm.most_common(terms)
        z = sum(v for _, v in top) or 1.0
        zq = sum(orig.values())
        out = {w: orig_weight * v / zq for w, v in orig.items()}
        for w, v in top:
            out[w] = out.get(w, 0.0) + (1 - orig_weight) * v / z
        return out


@lru_cache(maxsize=1)
def corpus_bm25() -> BM25:
    from precompute_tokens import index_texts

    ids, texts = index_texts()
    return BM25(ids, texts)
