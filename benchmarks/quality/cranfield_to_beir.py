"""Write a BEIR folder from the classic Cranfield files (cran.all.1400, cran.qry, cranqrel).

Cranfield is kept for independent checks: nothing in this repository was chosen on it.
Query ids are the queries' positions (1..225), as cranqrel numbers them (the `.I` numbers in
cran.qry skip values). cranqrel grades 1 (a complete answer) to 4 (minimum interest) become
relevance 4 to 1, so the most relevant documents weigh most in nDCG; grade -1 (of no interest) is 0.

    python benchmarks/quality/cranfield_to_beir.py DIR_WITH_CRAN_FILES OUT
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def records(text: str) -> list[dict[str, str]]:
    out = []
    for block in re.split(r"^\.I ", text, flags=re.M)[1:]:
        number, _, body = block.partition("\n")
        fields = {"I": number.strip()}
        for tag, value in re.findall(r"^\.([TABW])\n(.*?)(?=^\.[TABW]\n|\Z)", body, flags=re.M | re.S):
            fields[tag] = " ".join(value.split())
        out.append(fields)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    docs = records((args.source / "cran.all.1400").read_text(encoding="latin-1"))
    queries = records((args.source / "cran.qry").read_text(encoding="latin-1"))
    (args.out / "qrels").mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w") as handle:
        for d in docs:
            handle.write(json.dumps({"_id": d["I"], "title": d.get("T", ""), "text": d.get("W", ""), "metadata": {}}) + "\n")
    with (args.out / "queries.jsonl").open("w") as handle:
        for position, q in enumerate(queries, 1):
            handle.write(json.dumps({"_id": str(position), "text": q.get("W", ""), "metadata": {}}) + "\n")
    rows = []
    for line in (args.source / "cranqrel").read_text().splitlines():
        if line.strip():
            qid, did, grade = line.split()[:3]
            rows.append((qid, did, 5 - int(grade) if int(grade) > 0 else 0))
    with (args.out / "qrels" / "test.tsv").open("w") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(f"{q}\t{d}\t{r}\n" for q, d, r in rows)
    print(f"{args.out}: {len(docs)} documents, {len(queries)} queries, {len(rows)} judgments")


if __name__ == "__main__":
    main()
