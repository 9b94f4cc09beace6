"""What the follow-up topic check's cross-encoder, and judging turns without a cue, add to a turn's latency.

Ingests the tenants' seed corpora into a fresh milvus-lite file and runs every case of a graded
conversational set (two turns each) in one conversation per rules, interleaved case by case and round
by round: the shipped rules (`followup.DEFAULT_RULES`: the cosine tests, the cross-encoder's margin, and
turns without a cue judged by it, `Rules.standalone_margin`), the same rules judging only cued turns
(`standalone_margin=None`), the shipped rules without the first hits' arbitration of an unsure turn
(`first_hit_margin=None`, `shared_first_margin=None`), and the rules without the cross-encoder
(`relevance_margin=None`, cued turns only). Prints, per rules, the median and 90th percentile of the
second turn's wall time (its trace's duration) over the cued turns the topic check judged (a would-be
follow-up), over those where the cross-encoder ran (its own first hit not from the previous turn's
sources), over the turns without a cue (judged by the shipped rules only) and over the turns the shipped
rules found unsure, and the median differences.

    python benchmarks/conversations_latency.py --graded tests/data/conversations_graded.jsonl --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graded", type=Path, default=ROOT / "tests" / "data" / "conversations_graded.jsonl")
    parser.add_argument("--tenants", type=Path, default=ROOT / "tenants")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = [json.loads(line) for line in args.graded.read_text().splitlines() if line.strip()]
    asyncio.run(run(cases, args.tenants, args.rounds))


async def run(cases: list[dict], tenants: Path, rounds: int) -> None:
    from gateway.conversations.followup import DEFAULT_RULES
    from gateway.ingest.seed import ingest_seeds
    from gateway.retrieval.stages.cross_encoder import shared_model
    from gateway.routing.searcher import SearchRequest, Searcher
    from gateway.runtime import build_runtime
    from gateway.settings import Settings
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role

    arms = {"shipped": DEFAULT_RULES, "cued turns only": replace(DEFAULT_RULES, standalone_margin=None),
            "without first-hit arbitration": replace(DEFAULT_RULES, first_hit_margin=None,
                                                     shared_first_margin=None),
            "without cross-encoder": replace(DEFAULT_RULES, relevance_margin=None, standalone_margin=None,
                                             first_hit_margin=None, shared_first_margin=None)}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(milvus_uri=str(Path(tmp) / "gateway.db"), tenants_dir=tenants)
        runtime = build_runtime(settings)
        try:
            list(ingest_seeds(runtime))
            shared_model()  # loaded once per process (about 0.3 s), not charged to the first turn measured
            searchers = {name: Searcher(runtime.registry, runtime.store, runtime.embedder, settings,
                                        tokens=runtime.tokens, conversation_rules=rules) for name, rules in arms.items()}
            durations: dict[str, list[float]] = {name: [] for name in arms}
            kinds: list[str] = []  # per turn measured, as the shipped rules saw it: cued, scored (cued, the
            # cross-encoder ran), uncued (no cue: judged by the shipped rules only), or unjudged
            unsure: list[bool] = []  # per turn measured: the shipped rules found it unsure
            for _ in range(rounds):
                for case in cases:
                    principal = Principal(case["tenant"], Role.READER)
                    for name, searcher in searchers.items():
                        cid = f"latency-{uuid.uuid4().hex[:12]}"
                        result = None
                        for query in case["turns"]:
                            result = await searcher.search(principal, SearchRequest(
                                query=query, collection=case["collection"], conversation_id=cid))
                        durations[name].append(result.trace.duration_ms)
                        if name == "shipped":
                            check = next((s.detail for s in result.trace.stages if s.name == "topicCheck"), None)
                            kinds.append("unjudged" if check is None else "uncued" if check["cue"] == "none"
                                         else "scored" if check.get("ownRelevance") is not None else "cued")
                            unsure.append(check is not None and check["topic"] == "unsure")

            def subset(name: str, wanted: tuple[str, ...]) -> list[float]:
                return [ms for ms, kind in zip(durations[name], kinds) if kind in wanted]

            cued, scored, uncued = ("cued", "scored"), ("scored",), ("uncued",)

            def unsure_turns(name: str) -> list[float]:
                return [ms for ms, flag in zip(durations[name], unsure) if flag]

            summary = {name: {"judged_turns": len(subset(name, cued)), "judged_median_ms": _median(subset(name, cued)),
                              "judged_p90_ms": _p90(subset(name, cued)),
                              "cross_encoder_turns": len(subset(name, scored)),
                              "cross_encoder_median_ms": _median(subset(name, scored)),
                              "cross_encoder_p90_ms": _p90(subset(name, scored)),
                              "uncued_turns": len(subset(name, uncued)),
                              "uncued_median_ms": _median(subset(name, uncued)),
                              "uncued_p90_ms": _p90(subset(name, uncued)),
                              "unsure_turns": len(unsure_turns(name)), "unsure_median_ms": _median(unsure_turns(name)),
                              "unsure_p90_ms": _p90(unsure_turns(name))}
                       for name in arms}

            def added(key: str, base: str) -> float:
                return round(summary["shipped"][key] - summary[base][key], 1)

            print(json.dumps({"cases": len(cases), "rounds": rounds, "arms": summary,
                              "judged_turns_median_added_ms": added("judged_median_ms", "without cross-encoder"),
                              "cross_encoder_turns_median_added_ms": added("cross_encoder_median_ms",
                                                                           "without cross-encoder"),
                              "uncued_turns_median_added_ms": added("uncued_median_ms", "cued turns only"),
                              "unsure_turns_median_added_ms": added("unsure_median_ms",
                                                                    "without first-hit arbitration")}, indent=1))
        finally:
            runtime.close()


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else 0.0


def _p90(values: list[float]) -> float:
    return round(statistics.quantiles(values, n=10)[-1], 1) if len(values) >= 2 else _median(values)


if __name__ == "__main__":
    main()
