"""Leave-one-collection-out choice of a rerank setting, over BEIR folders on disk.

Three steps, each cached under --work so a re-run only does what is missing:

  candidates  the hybrid top 100 of every judged query (the collection defaults of the tenant file
              run.py writes), with each hit's score, title, content and dense and BM25 ranks, from the gateway's own
              CollectionRetriever, as `gateway eval` runs it;
  score       the raw scores of the bundled `crossEncoder` and `colbert` models for the top --depth
              candidates, at --tokens passage tokens, computed by the same model classes the
              rerankers use (gateway/retrieval/stages/cross_encoder.py, colbert.py);
  select      every setting of the grid (model, tokens, topK, blend, weight) scored by the gateway's
              `blend` on every collection; for each collection, the setting is chosen on the others
              (highest worst-case nDCG@10 gain over hybrid, then highest mean gain) and scored on it;
  gate        early exit (`skipIfConfident`) for one setting (--tokens, --top-k, --blend, --weight): every
              rule of the grid decides, by the gateway's own `confidence`, which queries are re-scored;
              for each collection, the rule is chosen on the others (the fewest queries re-scored among
              the rules whose worst-case gain is at least the ungated setting's) and scored on it.

  GATEWAY_TENANTS_DIR=/tmp/gateway-quality/tenants GATEWAY_MILVUS_URI=/tmp/gateway-quality/store/gateway.db \
    python benchmarks/quality/loco.py candidates --data /work/datasets
  python benchmarks/quality/loco.py score --data /work/datasets --model crossEncoder --tokens 128 --depth 20
  python benchmarks/quality/loco.py select --data /work/datasets --exclude msmarco
  python benchmarks/quality/loco.py gate --data /work/datasets --exclude scifact --tokens 64 --top-k 5 --weight 0.4

run.py ingests the folders and writes that tenant file (`python benchmarks/quality/run.py --data DIR --ingest-only`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parent))
from run import NAMESPACE, TENANT, collections_on_disk  # noqa: E402

from gateway.retrieval.evaluation import RANK_DEPTH, load_qrels, load_queries, score  # noqa: E402

WORK = Path("/tmp/gateway-quality")
TOP_KS = (5, 10, 15, 20, 30)
WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def judged(folder: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    queries, qrels = load_queries(folder / "queries.jsonl"), load_qrels(folder / "qrels/test.tsv")
    qrels = {q: r for q, r in qrels.items() if q in queries and any(v > 0 for v in r.values())}
    return queries, qrels


async def dump_candidates(name: str, folder: Path, out: Path) -> None:
    from gateway.retrieval.defaults import options_for
    from gateway.retrieval.options import Mode, Query
    from gateway.retrieval.retrievers import CollectionRetriever
    from gateway.runtime import build_runtime
    from gateway.settings import Settings

    queries, qrels = judged(folder)
    runtime = build_runtime(Settings())
    try:
        ref = runtime.registry.resolve(TENANT, name, namespace=NAMESPACE)
        if not runtime.store.open_existing(ref.scope):
            raise SystemExit(f"{name} is not ingested; run run.py --ingest-only first")
        retriever = CollectionRetriever(runtime.store, runtime.embedder, ref)
        options = options_for(ref.config, mode=Mode.HYBRID, limit=RANK_DEPTH)
        rows = {}
        for qid in qrels:
            hits = await retriever.retrieve(Query(queries[qid]), options)
            rows[qid] = {"query": queries[qid],
                         "hits": [[h.source_id, h.score, f"{h.title}\n{h.content}" if h.title else h.content,
                                   {sig.signal: sig.rank for sig in h.provenance.scores}]
                                  for h in hits]}
        out.write_text(json.dumps(rows))
    finally:
        runtime.close()


def candidates(work: Path, name: str) -> dict:
    return json.loads((work / "candidates" / f"{name}.json").read_text())


def score_path(work: Path, name: str, model: str, tokens: int) -> Path:
    return work / "scores" / f"{name}.{model}.{tokens}.json"


def compute_scores(work: Path, name: str, model: str, tokens: int, depth: int) -> None:
    """Raw scores of the top `depth` candidates; extends a shallower cached run."""
    path = score_path(work, name, model, tokens)
    done = json.loads(path.read_text()) if path.exists() else {}
    cands = candidates(work, name)
    if model == "crossEncoder":
        from gateway.retrieval.stages.cross_encoder import CrossEncoderModel

        ce = CrossEncoderModel()

        def run(question: str, passages: list[str]) -> list[float]:
            return ce.score(question, passages, tokens, 16)
    else:
        from gateway.retrieval.stages.colbert import ColbertModel
        from gateway.retrieval.stages.rerank import maxsim_many

        cb = ColbertModel()

        def run(question: str, passages: list[str]) -> list[float]:
            return list(maxsim_many(cb.query(question), cb.documents(passages, tokens, 16)))
    started, passes = time.perf_counter(), 0
    for qid, row in cands.items():
        have = done.get(qid, [])
        top = [h[2] for h in row["hits"][:depth]]
        if len(have) >= len(top):
            continue
        # Scores of a passage do not depend on the others in its batch beyond int8 quantisation noise
        # (docs/benchmarks.md); the deeper ones are scored on their own and appended.
        done[qid] = [*have, *map(float, run(row["query"], top[len(have):]))]
        passes += len(top) - len(have)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(done))
    elapsed = time.perf_counter() - started
    print(f"{name} {model}@{tokens} depth {depth}: {passes} passages in {elapsed:.1f} s "
          f"({1000 * elapsed / max(passes, 1):.1f} ms each)", file=sys.stderr)


def _minmax(values: np.ndarray) -> np.ndarray:
    lo, hi = values.min(), values.max()
    return (values - lo) / (hi - lo) if hi > lo else np.ones_like(values)


def reranked(hits: list, raw: list[float], top_k: int, blend: str, weight: float) -> list[str]:
    """The gateway's blend (stages/rerank.py) of the top `top_k`, then the rest (rest: keep)."""
    k = min(top_k, len(hits), len(raw))
    ids = [h[0] for h in hits]
    old = np.array([h[1] for h in hits[:k]], dtype=np.float64)
    new = np.array(raw[:k], dtype=np.float64)
    if blend == "replace":
        combined = new
    elif blend == "weighted":
        combined = (1 - weight) * _minmax(old) + weight * _minmax(new)
    else:  # rrf
        new_rank = np.empty(k)
        new_rank[sorted(range(k), key=lambda i: (-new[i], ids[i]))] = np.arange(1, k + 1)
        combined = (1 - weight) / (60 + np.arange(1, k + 1)) + weight / (60 + new_rank)
    order = sorted(range(k), key=lambda i: (-combined[i], ids[i]))
    return [ids[i] for i in order] + ids[k:]


def run_of(cands: dict, ranking) -> dict[str, dict[str, float]]:
    out = {}
    for qid, row in cands.items():
        ids = ranking(qid, row)
        out[qid] = {d: float(len(ids) - i) for i, d in enumerate(dict.fromkeys(ids))}
    return out


def settings_grid(models: list[tuple[str, int]]) -> list[tuple]:
    grid = []
    for (model, tokens), k in itertools.product(models, TOP_KS):
        grid.append((model, tokens, k, "replace", 1.0))
        grid += [(model, tokens, k, "weighted", w) for w in WEIGHTS]
        grid += [(model, tokens, k, "rrf", w) for w in (0.5, 0.7)]
    return grid


def select(work: Path, names: list[str], folders: dict[str, Path], max_k: int | None,
           max_tokens: int | None) -> None:
    per: dict[str, dict] = {}
    available: set[tuple[str, int, int]] = set()
    for name in names:
        _, qrels = judged(folders[name])
        cands = candidates(work, name)
        hybrid = score(run_of(cands, lambda q, r: [h[0] for h in r["hits"]]), qrels)
        raws = {}
        for path in (work / "scores").glob(f"{name}.*.json"):
            _, model, tokens = path.name[:-5].rsplit(".", 2)
            raw = json.loads(path.read_text())
            depth = min(len(raw.get(q, [])) for q in cands)
            raws[(model, int(tokens))] = (raw, depth)
        per[name] = {"qrels": qrels, "cands": cands, "hybrid": hybrid, "raws": raws, "queries": len(cands)}
    common = set.intersection(*(set(p["raws"]) for p in per.values()))
    grid = [s for s in settings_grid(sorted(common))
            if all(per[n]["raws"][(s[0], s[1])][1] >= s[2] for n in names) and (max_k is None or s[2] <= max_k)
            and (max_tokens is None or s[1] <= max_tokens)]
    table: dict[tuple, dict[str, dict[str, float]]] = {}
    for setting in grid:
        model, tokens, k, blend, weight = setting
        table[setting] = {}
        for name, p in per.items():
            raw = p["raws"][(model, tokens)][0]
            run = run_of(p["cands"], lambda q, r: reranked(r["hits"], raw[q], k, blend, weight))
            table[setting][name] = score(run, p["qrels"])

    def gain(setting, name):
        return table[setting][name]["ndcg@10"] - per[name]["hybrid"]["ndcg@10"]

    print("| collection | queries | hybrid nDCG@10 | R@100 |")
    print("| --- | --- | --- | --- |")
    for name, p in per.items():
        print(f"| {name} | {p['queries']} | {p['hybrid']['ndcg@10']:.4f} | {p['hybrid']['recall@100']:.4f} |")
    print(f"\n{len(grid)} settings (models {sorted(common)}, topK <= {max_k or max(TOP_KS)}, "
          f"tokens <= {max_tokens or 'any'})\n")
    print("| held out | chosen on the others (worst-case gain, then mean) | gain on the others: min / mean "
          "| held-out nDCG@10 (hybrid) | held-out gain |")
    print("| --- | --- | --- | --- | --- |")
    for held in names:
        others = [n for n in names if n != held]
        best = max(grid, key=lambda s: (round(min(gain(s, n) for n in others), 4),
                                        round(sum(gain(s, n) for n in others) / len(others), 4), -s[2]))
        print(f"| {held} | {label(best)} | {min(gain(best, n) for n in others):+.4f} / "
              f"{sum(gain(best, n) for n in others) / len(others):+.4f} | {table[best][held]['ndcg@10']:.4f} "
              f"({per[held]['hybrid']['ndcg@10']:.4f}) | {gain(best, held):+.4f} |")
    print("\nTop settings by worst-case gain over all of these collections (reference; nothing is chosen on it):\n")
    ranked = sorted(grid, key=lambda s: (-min(gain(s, n) for n in names), -sum(gain(s, n) for n in names)))
    print("| setting | " + " | ".join(names) + " |")
    print("| --- | " + " | ".join("---" for _ in names) + " |")
    for setting in ranked[:12]:
        print(f"| {label(setting)} | " + " | ".join(f"{gain(setting, n):+.4f}" for n in names) + " |")


GATE_GAPS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)


def gate_rules() -> list:
    """None (always re-score), then every `skipIfConfident` of the grid."""
    from gateway.tenancy.pipelines import SkipIfConfidentParams

    rules: list = [None, SkipIfConfidentParams.model_validate({"signalsAgree": True})]
    for gap in GATE_GAPS:
        rules.append(SkipIfConfidentParams.model_validate({"scoreGap": gap}))
        rules.append(SkipIfConfidentParams.model_validate({"signalsAgree": True, "scoreGap": gap}))
    return rules


def gate_label(rule) -> str:
    if rule is None:
        return "always"
    parts = ["signalsAgree"] if rule.signals_agree else []
    parts += [f"scoreGap {rule.score_gap}"] if rule.score_gap else []
    return " or ".join(parts)


def settled(row: dict, rule) -> bool:
    """The gateway's `confidence` over the candidates' first two hits (score and dense/BM25 ranks)."""
    from gateway.retrieval.hit import Hit, Provenance, SignalScore
    from gateway.retrieval.stages.confidence import confidence

    if rule is None:
        return False
    hits = [Hit(namespace=NAMESPACE, collection="c", source_id=h[0], chunk_id="0", content="", score=h[1],
                provenance=Provenance(tenant=TENANT, namespace=NAMESPACE, collection="c", trust_tier="", retriever="",
                                      mode="hybrid", scores=tuple(SignalScore(s, 0.0, r) for s, r in h[3].items())))
            for h in row["hits"][:2]]
    return confidence(hits, rule).settled


def gate(work: Path, names: list[str], folders: dict[str, Path], tokens: int, top_k: int, blend: str,
         weight: float) -> None:
    rules = gate_rules()
    per: dict[str, dict] = {}
    for name in names:
        _, qrels = judged(folders[name])
        cands = candidates(work, name)
        if any(len(h) < 4 for row in cands.values() for h in row["hits"][:1]):
            raise SystemExit(f"{name}: candidates without dense/BM25 ranks; delete {work}/candidates/{name}.json "
                             f"and re-run `candidates`")
        raw = json.loads(score_path(work, name, "crossEncoder", tokens).read_text())
        hybrid = score(run_of(cands, lambda q, r: [h[0] for h in r["hits"]]), qrels)
        per[name] = {"hybrid": hybrid, "queries": len(cands), "rules": {}}
        for index, rule in enumerate(rules):
            skip = {q for q, row in cands.items() if settled(row, rule)}
            run = run_of(cands, lambda q, r: [h[0] for h in r["hits"]] if q in skip
                         else reranked(r["hits"], raw[q], top_k, blend, weight))
            metrics = score(run, qrels)
            per[name]["rules"][index] = {"gain": metrics["ndcg@10"] - hybrid["ndcg@10"], "ndcg": metrics["ndcg@10"],
                                         "recall": metrics["recall@100"], "share": 1 - len(skip) / len(cands)}
    print(f"crossEncoder@{tokens} top {top_k} {blend} {weight}; nDCG@10 gain over hybrid / share of queries "
          f"re-scored\n")
    print("| rule | " + " | ".join(names) + " |")
    print("| --- | " + " | ".join("---" for _ in names) + " |")
    for index, rule in enumerate(rules):
        print(f"| {gate_label(rule)} | " + " | ".join(
            f"{per[n]['rules'][index]['gain']:+.4f} / {per[n]['rules'][index]['share']:.2f}" for n in names) + " |")
    print("\nLeave one collection out, every rule above:\n")
    _gate_loco(per, names, rules, range(len(rules)))
    print("\nLeave one collection out, the rules without a score threshold (always, signalsAgree):\n")
    _gate_loco(per, names, rules, [i for i, rule in enumerate(rules) if rule is None or rule.score_gap is None])


def _gate_loco(per: dict, names: list[str], rules: list, among) -> None:
    print("| held out | queries | rule chosen on the others | held-out: re-scored | nDCG@10 (hybrid) | gain "
          "| gain always re-scoring | Recall@100 (hybrid) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for held in names:
        others = [n for n in names if n != held]

        def worst(index: int) -> float:
            return round(min(per[n]["rules"][index]["gain"] for n in others), 4)

        eligible = [i for i in among if worst(i) >= worst(0)]
        best = min(eligible, key=lambda i: (round(sum(per[n]["rules"][i]["share"] for n in others), 4),
                                            -sum(per[n]["rules"][i]["gain"] for n in others)))
        got, always = per[held]["rules"][best], per[held]["rules"][0]
        print(f"| {held} | {per[held]['queries']} | {gate_label(rules[best])} | {got['share']:.2f} | "
              f"{got['ndcg']:.4f} ({per[held]['hybrid']['ndcg@10']:.4f}) | {got['gain']:+.4f} | {always['gain']:+.4f} "
              f"| {got['recall']:.4f} ({per[held]['hybrid']['recall@100']:.4f}) |")


def label(setting: tuple) -> str:
    model, tokens, k, blend, weight = setting
    how = "replace" if blend == "replace" else f"{blend} {weight}"
    return f"{model}@{tokens} top {k} {how}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["candidates", "score", "select", "gate"])
    parser.add_argument("--data", type=Path, required=True, help="a folder of BEIR folders")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--only", help="comma-separated collection names (default: every one found)")
    parser.add_argument("--exclude", default="", help="comma-separated collection names to leave out")
    parser.add_argument("--model", choices=["crossEncoder", "colbert"], default="crossEncoder")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--top-k", type=int, default=5, help="gate: the setting's topK")
    parser.add_argument("--blend", choices=["replace", "weighted", "rrf"], default="weighted", help="gate: its blend")
    parser.add_argument("--weight", type=float, default=0.4, help="gate: its weight")
    parser.add_argument("--max-k", type=int, help="select: only settings with topK at most this")
    parser.add_argument("--max-tokens", type=int, help="select: only settings reading at most this many tokens")
    args = parser.parse_args()
    folders = collections_on_disk(args.data)
    names = [n for n in (args.only.split(",") if args.only else folders) if n not in args.exclude.split(",")]
    if args.step == "candidates":
        (args.work / "candidates").mkdir(parents=True, exist_ok=True)
        for name in names:
            out = args.work / "candidates" / f"{name}.json"
            if not out.exists():
                asyncio.run(dump_candidates(name, folders[name], out))
                print(f"{name}: candidates written", file=sys.stderr)
    elif args.step == "score":
        for name in names:
            compute_scores(args.work, name, args.model, args.tokens, args.depth)
    elif args.step == "gate":
        gate(args.work, names, folders, args.tokens, args.top_k, args.blend, args.weight)
    else:
        select(args.work, names, folders, args.max_k, args.max_tokens)


if __name__ == "__main__":
    main()
