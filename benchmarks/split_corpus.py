"""Split a BEIR corpus into N JSONL parts by a stable hash of the document id.

    python benchmarks/split_corpus.py $SCIFACT/corpus.jsonl data/scifact-split 4
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def part_of(doc_id: str, parts: int) -> int:
    return int(hashlib.sha256(doc_id.encode()).hexdigest(), 16) % parts


def main() -> None:
    source, target, parts = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    target.mkdir(parents=True, exist_ok=True)
    handles = [(target / f"part-{i}.jsonl").open("w", encoding="utf-8") for i in range(parts)]
    counts = [0] * parts
    with source.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                index = part_of(json.loads(line)["_id"], parts)
                handles[index].write(line if line.endswith("\n") else line + "\n")
                counts[index] += 1
    for handle in handles:
        handle.close()
    print(json.dumps({"parts": counts}))


if __name__ == "__main__":
    main()
