"""Retrieval quality on BEIR-style test collections, scored by trec_eval (pytrec-eval)."""

from __future__ import annotations

import csv
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import ConfigError
from gateway.retrieval.hit import Hit
from gateway.retrieval.options import Query, SearchOptions
from gateway.retrieval.retrievers import Retriever

RANK_DEPTH = 100   # Recall@100 needs 100 documents per query
CHUNK_DEPTH = 300  # chunks fetched to fill 100 distinct documents after collapsing
# trec_eval's bindings are the `eval` extra: serving never scores, and they bring SciPy (about 145 MB).
TREC_EVAL_MISSING = ("`gateway eval` scores with trec_eval, and its bindings (pytrec-eval-terrier) are not "
                     "installed; install the gateway's `eval` extra: pip install -e '.[eval]' (the `dev` extra "
                     "includes it)")


def trec_eval():
    """The pytrec_eval module; a ConfigError naming the extra to install when it is missing."""
    try:
        import pytrec_eval
    except ImportError:
        raise ConfigError(TREC_EVAL_MISSING) from None
    return pytrec_eval


@dataclass(frozen=True)
class EvalResult:
    metrics: dict[str, float]
    queries: int
    latency_ms_p50: float
    latency_ms_p95: float


def load_queries(path: Path) -> dict[str, str]:
    queries = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                record = json.loads(line)
                queries[str(record["_id"])] = record["text"]
    return queries


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter="\t")
        header = next(reader)
        if header[:2] != ["query-id", "corpus-id"]:
            raise ValueError(f"{path}: expected a BEIR qrels header 'query-id corpus-id score', got {header}")
        for row in reader:
            if row:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels


def document_ranking(hits: Sequence[Hit], depth: int = RANK_DEPTH) -> dict[str, float]:
    """Collapse chunk hits to documents, each scored by its best chunk."""
    best: dict[str, float] = {}
    for hit in hits:
        if hit.source_id not in best:
            best[hit.source_id] = hit.score
        if len(best) == depth:
            break
    return best


def score(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """nDCG@10, Recall@100 and MRR@10, averaged over the judged queries."""
    judged = {q: dict(r) for q, r in qrels.items()}
    full = {q: dict(run.get(q, {})) for q in judged}
    top10 = {q: dict(sorted(docs.items(), key=lambda kv: (-kv[1], kv[0]))[:10]) for q, docs in full.items()}
    evaluator = trec_eval().RelevanceEvaluator
    deep = evaluator(judged, {"ndcg_cut.10", "recall.100"}).evaluate(_nonempty(full))
    shallow = evaluator(judged, {"recip_rank"}).evaluate(_nonempty(top10))
    n = len(judged)

    def mean(results: Mapping[str, Mapping[str, float]], measure: str) -> float:
        # Queries with no retrieved document count as 0, as trec_eval -c would.
        return sum(results.get(q, {}).get(measure, 0.0) for q in judged) / n

    return {"ndcg@10": round(mean(deep, "ndcg_cut_10"), 4),
            "recall@100": round(mean(deep, "recall_100"), 4),
            "mrr@10": round(mean(shallow, "recip_rank"), 4)}


def _nonempty(run: Mapping[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {q: docs for q, docs in run.items() if docs}


async def evaluate(retriever: Retriever, options: SearchOptions, queries: Mapping[str, str],
                   qrels: Mapping[str, Mapping[str, int]]) -> EvalResult:
    """Run every judged query once, sequentially, timing each."""
    run: dict[str, dict[str, float]] = {}
    latencies = []
    for qid in qrels:
        if qid not in queries:
            continue
        started = time.perf_counter()
        hits = await retriever.retrieve(Query(queries[qid]), options)
        latencies.append((time.perf_counter() - started) * 1000)
        run[qid] = document_ranking(hits)
    latencies.sort()
    return EvalResult(
        metrics=score(run, {q: r for q, r in qrels.items() if q in queries}),
        queries=len(run),
        latency_ms_p50=round(statistics.median(latencies), 2) if latencies else 0.0,
        latency_ms_p95=round(latencies[int(0.95 * (len(latencies) - 1))], 2) if latencies else 0.0,
    )
