"""Citation support check: choose its thresholds by cross-validation, then measure it on held-out data.

The labelled set, benchmarks/data/citation_support.jsonl, pairs a cited sentence with a cited chunk,
labelled "supported" or "unsupported", in two splits that share no claim:

  scifact      SciFact claims (Wadden et al., EMNLP 2020; CC BY 4.0, abstracts ODC-By 1.0) with the
               abstract sentences around their rationale as the chunk: SUPPORT evidence is
               "supported"; CONTRADICT evidence, the cited abstract of a claim with no evidence
               ("nei") and another claim's evidence ("unrelated") are "unsupported". Claims of the
               BEIR train qrels are the tune split, those of the test qrels the test split.
  handwritten  benchmarks/citation_support_cases.py on the demo corpus; alternate cases of each kind
               go to tune and test.

    python benchmarks/citation_support.py build --scifact DIR   # write the jsonl from a BEIR SciFact copy
    python benchmarks/citation_support.py [--folds 5]           # score, cross-validate, report

Thresholds are chosen on the tune split only: `weak_at` is the highest score below which at least 90%
of pairs are unsupported (an UNSUPPORTED verdict makes the answer invalid, so it must be right 9 times
in 10), and `supported_at` the threshold at or above it that maximises F0.5 of the SUPPORTED verdict
(precision counts twice; 90% precision for it comes only at about 10% recall, as contradictions score
like support). The 5-fold figures (folds by claim) say how well that rule generalises; the test
figures use the thresholds chosen on the whole tune split.
Per class: precision = share of that verdict whose label agrees; recall = share of the label's pairs
given that verdict (WEAK is neither: it is reported as the share of each label that lands there).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.citation_support_cases import CASES  # noqa: E402
from gateway.grounding.citations import SupportThresholds, SupportVerdict  # noqa: E402
from gateway.grounding.support import MAX_TOKENS, verdict  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "citation_support.jsonl"
DEMO_DOCS = ROOT / "tenants" / "corpora" / "acme" / "docs"
# Per split and kind; enough for stable figures at ~75 ms a pair.
PER_KIND = {"tune": 100, "test": 90}
# The chunker's child size on the demo tenants (tenants/acme.yaml).
CHUNK_CHARS = 800
UNSUPPORTED_PRECISION = 0.9
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


def build(scifact: Path) -> None:
    corpus = {}
    with (scifact / "corpus.jsonl").open() as lines:
        for line in lines:
            doc = json.loads(line)
            corpus[doc["_id"]] = _SENTENCE.split(doc["text"])
    splits = {name: _qrels(scifact / "qrels" / f"{name}.tsv") for name in ("train", "test")}
    claims = [json.loads(line) for line in (scifact / "queries.jsonl").open()]
    rng = random.Random(13)
    rows: list[dict] = []
    for split, qrels in (("tune", splits["train"]), ("test", splits["test"])):
        pool: dict[str, list[dict]] = defaultdict(list)
        evidence_chunks: list[tuple[str, str]] = []
        for item in claims:
            if item["_id"] not in qrels:
                continue
            if not item["metadata"]:
                for doc in qrels[item["_id"]]:
                    pool["nei"].append(_row(split, item, doc, _window(corpus[doc], [0]), "unsupported", "nei"))
            for doc, sets in item["metadata"].items():
                for evidence in sets:
                    chunk = _window(corpus[doc], evidence["sentences"])
                    evidence_chunks.append((item["_id"], chunk))
                    label, kind = (("supported", "support") if evidence["label"] == "SUPPORT"
                                   else ("unsupported", "contradict"))
                    pool[kind].append(_row(split, item, doc, chunk, label, kind))
        for item in rng.sample([c for c in claims if c["_id"] in qrels], PER_KIND[split]):
            other = rng.choice([e for e in evidence_chunks if e[0] != item["_id"]])
            pool["unrelated"].append(_row(split, item, "other", other[1], "unsupported", "unrelated"))
        for kind in ("support", "contradict", "nei", "unrelated"):
            rows.extend(rng.sample(pool[kind], min(PER_KIND[split], len(pool[kind]))))
    paragraphs = {name: (DEMO_DOCS / name).read_text().split("\n\n") for name in {c[0] for c in CASES}}
    seen: dict[str, int] = defaultdict(int)
    for number, (doc, index, sentence, label, kind) in enumerate(CASES):
        seen[kind] += 1  # alternate within each kind, so both splits get every kind
        rows.append({"split": "tune" if seen[kind] % 2 else "test", "origin": "handwritten",
                     "claim": f"hand-{number}", "sentence": sentence, "chunk": paragraphs[doc][index].strip(),
                     "source": f"{doc}#{index}", "label": label, "kind": kind})
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    print(f"wrote {len(rows)} pairs to {DATA.relative_to(ROOT)}")


def _qrels(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for line in path.read_text().splitlines()[1:]:
        query, doc, _ = line.split("\t")
        found[query].append(doc)
    return found


def _window(sentences: list[str], picked: list[int]) -> str:
    """The rationale sentences and their neighbours, cut to one chunk's size (the rationale first)."""
    lo, hi = max(0, min(picked) - 1), min(len(sentences), max(picked) + 2)
    text = " ".join(sentences[lo:hi])
    if len(text) > CHUNK_CHARS:
        text = " ".join(sentences[min(picked):hi])[:CHUNK_CHARS]
    return text


def _row(split: str, item: dict, doc: str, chunk: str, label: str, kind: str) -> dict:
    return {"split": split, "origin": "scifact", "claim": item["_id"], "sentence": item["text"], "chunk": chunk,
            "source": doc, "label": label, "kind": kind}


def evaluate(folds: int) -> None:
    from gateway.retrieval.stages.cross_encoder import CrossEncoderModel

    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    model = CrossEncoderModel(threads=1)
    started = time.perf_counter()
    for row in rows:
        row["score"] = model.score(row["sentence"], [row["chunk"]], MAX_TOKENS)[0]
    per_pair_ms = 1000 * (time.perf_counter() - started) / len(rows)
    tune = [r for r in rows if r["split"] == "tune"]
    test = [r for r in rows if r["split"] == "test"]
    claims = sorted({r["claim"] for r in tune})
    random.Random(7).shuffle(claims)
    fold_of = {claim: i % folds for i, claim in enumerate(claims)}
    cv_rows: list[tuple[dict, SupportVerdict]] = []
    for fold in range(folds):
        chosen = choose([r for r in tune if fold_of[r["claim"]] != fold])
        cv_rows.extend((r, verdict(r["score"], chosen)) for r in tune if fold_of[r["claim"]] == fold)
        print(f"fold {fold}: supported_at {chosen.supported_at:.2f}, weak_at {chosen.weak_at:.2f}")
    final = choose(tune)
    print(f"\nchosen on the whole tune split: supported_at {final.supported_at:.2f}, weak_at {final.weak_at:.2f}")
    print(f"scoring: {per_pair_ms:.0f} ms per pair on one thread at {MAX_TOKENS} tokens, {len(rows)} pairs")
    report("tune split, 5-fold cross-validation", cv_rows)
    test_rows = [(r, verdict(r["score"], final)) for r in test]
    report("test split (never used for choosing)", test_rows)
    for origin in ("scifact", "handwritten"):
        report(f"test split, {origin} only", [(r, v) for r, v in test_rows if r["origin"] == origin])


def choose(rows: list[dict]) -> SupportThresholds:
    candidates = sorted({round(r["score"], 2) for r in rows})
    weak_at = max(t for t in candidates if _precision(rows, lambda s: s < t, "unsupported") >= UNSUPPORTED_PRECISION)
    supported_at = max((t for t in candidates if t >= weak_at),
                       key=lambda t: (_f05(rows, lambda s: s >= t, "supported"), -t))
    return SupportThresholds(supported_at=supported_at, weak_at=weak_at)


def _precision(rows: list[dict], says, label: str) -> float:
    said = [r for r in rows if says(r["score"])]
    return sum(r["label"] == label for r in said) / len(said) if said else 0.0


def _f05(rows: list[dict], says, label: str) -> float:
    said = [r for r in rows if says(r["score"])]
    hits = sum(r["label"] == label for r in said)
    relevant = sum(r["label"] == label for r in rows)
    if not hits:
        return 0.0
    precision, recall = hits / len(said), hits / relevant
    return 1.25 * precision * recall / (0.25 * precision + recall)


def report(title: str, judged: list[tuple[dict, SupportVerdict]]) -> None:
    print(f"\n{title}: {len(judged)} pairs")
    for name, label in (("SUPPORTED", "supported"), ("UNSUPPORTED", "unsupported")):
        said = [r for r, v in judged if v is SupportVerdict(name.lower())]
        relevant = [r for r, _ in judged if r["label"] == label]
        agree = sum(r["label"] == label for r in said)
        print(f"  {name:<11} precision {_ratio(agree, len(said))}  recall {_ratio(agree, len(relevant))}")
    for label in ("supported", "unsupported"):
        pairs = [v for r, v in judged if r["label"] == label]
        print(f"  WEAK        {_ratio(sum(v is SupportVerdict.WEAK for v in pairs), len(pairs))} of {label} pairs")
    kinds: dict[str, list[SupportVerdict]] = defaultdict(list)
    for r, v in judged:
        kinds[r["kind"]].append(v)
    for kind, verdicts in sorted(kinds.items()):
        share = {v.value: sum(x is v for x in verdicts) for v in SupportVerdict}
        print(f"  kind {kind:<10} n={len(verdicts):<4} " + " ".join(f"{k} {n}" for k, n in share.items()))


def _ratio(part: int, whole: int) -> str:
    return f"{part / whole:.3f} ({part}/{whole})" if whole else "n/a (0/0)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", choices=("build", "evaluate"), default="evaluate")
    parser.add_argument("--scifact", type=Path, help="a BEIR SciFact folder (corpus.jsonl, queries.jsonl, qrels/)")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    if args.command == "build":
        if args.scifact is None:
            parser.error("build needs --scifact DIR")
        build(args.scifact)
    else:
        evaluate(args.folds)


if __name__ == "__main__":
    main()
