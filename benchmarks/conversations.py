"""Follow-up resolution on the two-turn test set: is the follow-up's top hit the intended source?

Ingests the demo tenants' seed corpora into a fresh milvus-lite file and runs every case of
tests/data/followups.jsonl three ways, in one interleaved pass:

  alone      the follow-up searched by itself (no conversation)
  expanded   the resolved query searched by itself (the rule-based expansion, no boost)
  resolved   turn 1 then turn 2 in one conversation (expansion and the source boost)

Each search uses the collection's defaults (hybrid, RRF, limit 5). Prints one JSON line per case
and a summary: top-1 accuracy per kind (anaphora, short, shift) and overall.

    python benchmarks/conversations.py [--cases tests/data/followups.jsonl] [--boost 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import uuid
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=Path, default=ROOT / "tests" / "data" / "followups.jsonl")
    parser.add_argument("--tenants", type=Path, default=ROOT / "tenants")
    parser.add_argument("--boost", type=float, default=None, help="override conversations.boost for every tenant")
    args = parser.parse_args()
    cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
    asyncio.run(run(cases, args.tenants, args.boost))


async def run(cases: list[dict], tenants: Path, boost: float | None) -> None:
    from gateway.ingest.seed import ingest_seeds
    from gateway.routing.searcher import SearchRequest, Searcher
    from gateway.runtime import build_runtime
    from gateway.settings import Settings
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role
    from gateway.tenancy.registry import TenantRegistry

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(milvus_uri=str(Path(tmp) / "gateway.db"), tenants_dir=tenants)
        runtime = build_runtime(settings)
        try:
            list(ingest_seeds(runtime))
            registry = runtime.registry
            if boost is not None:
                registry = TenantRegistry({t.id: t.model_copy(update={"conversations": t.conversations.model_copy(
                    update={"boost": boost})}) for t in runtime.registry})
            searcher = Searcher(registry, runtime.store, runtime.embedder, settings, tokens=runtime.tokens)
            hits_at_1: dict[str, Counter] = defaultdict(Counter)
            for case in cases:
                principal = Principal(case["tenant"], Role.READER)
                first, second = case["turns"]
                collection = case["collection"]

                async def top(query: str, conversation: str | None = None):
                    result = await searcher.search(principal, SearchRequest(
                        query=query, collection=collection, conversation_id=conversation))
                    return result

                alone = await top(second)
                cid = f"bench-{uuid.uuid4().hex[:12]}"
                await top(first, cid)
                resolved = await top(second, cid)
                followup = next(s for s in resolved.trace.stages if s.name == "followUp").detail
                expanded = await top(followup["searched"])
                row = {"id": case["id"], "kind": case["kind"], "intended": case["intended"],
                       "method": followup["method"], "reason": followup["reason"]}
                for name, result in (("alone", alone), ("expanded", expanded), ("resolved", resolved)):
                    source = result.hits[0].source_id if result.hits else None
                    row[name] = source
                    for kind in (case["kind"], "all"):
                        hits_at_1[kind][name] += int(source == case["intended"])
                        if name == "alone":
                            hits_at_1[kind]["cases"] += 1
                print(json.dumps(row))
            summary = {kind: {"cases": c["cases"], **{name: f"{c[name]}/{c['cases']} ({c[name] / c['cases']:.0%})"
                                                      for name in ("alone", "expanded", "resolved")}}
                       for kind, c in sorted(hits_at_1.items())}
            print(json.dumps({"summary": summary}, indent=1))
        finally:
            runtime.close()


if __name__ == "__main__":
    main()
