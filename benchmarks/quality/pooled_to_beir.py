"""Write a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) from a reranking-style JSON list
whose entries are {"query_id", "query", "docs": [text, ...], "relevance_map": {"0": 0|1, ...}}, the
layout of the `data/dataset-<name>.json` files in the public repository digital-duck/maniscope.

The corpus is the pool: every distinct passage of every query, its id `p` + the first 16 hex digits
of the text's sha1, so the same passage under two queries is one document. Every passage a query
lists is judged for it (relevance 0 or 1), as the file says. docs/benchmarks.md gives the source
commit and the sha256 of the files this writes.

    python benchmarks/quality/pooled_to_beir.py dataset-arguana.json /work/datasets/arguana
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path


def doc_id(text: str) -> str:
    return "p" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def convert(entries: list[dict], out: Path) -> tuple[int, int, int]:
    corpus: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: list[tuple[str, str, int]] = []
    for entry in entries:
        qid = str(entry["query_id"])
        if qid in queries:
            raise SystemExit(f"query id {qid!r} appears twice")
        queries[qid] = entry["query"]
        judged: dict[str, int] = {}
        for index, text in enumerate(entry["docs"]):
            did = doc_id(text)
            corpus.setdefault(did, text)
            judged[did] = max(judged.get(did, 0), int(entry["relevance_map"][str(index)]))
        qrels.extend((qid, did, rel) for did, rel in judged.items())
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for did, text in corpus.items():
            handle.write(json.dumps({"_id": did, "title": "", "text": text, "metadata": {}}) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for qid, text in queries.items():
            handle.write(json.dumps({"_id": qid, "text": text, "metadata": {}}) + "\n")
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(f"{q}\t{d}\t{r}\n" for q, d, r in qrels)
    return len(corpus), len(queries), sum(1 for *_, r in qrels if r > 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a dataset-<name>.json file")
    parser.add_argument("out", type=Path, help="the BEIR folder to write")
    args = parser.parse_args()
    docs, queries, relevant = convert(json.loads(args.source.read_text(encoding="utf-8")), args.out)
    print(f"{args.out}: {docs} passages, {queries} queries, {relevant} relevant judgments")


if __name__ == "__main__":
    main()
