"""Follow-up resolution on the two-turn test set: is the follow-up's top hit the intended source?

Ingests the demo tenants' seed corpora into a fresh milvus-lite file and runs every case of
tests/data/followups.jsonl three ways, in one interleaved pass:

  alone      the follow-up searched by itself (no conversation)
  expanded   the resolved query searched by itself (the rule-based expansion, no boost)
  resolved   turn 1 then turn 2 in one conversation (expansion and the source boost)

Each search uses the collection's defaults (hybrid, RRF, limit 5). Prints one JSON line per case
and a summary: top-1 accuracy per kind (anaphora, short, shift) and overall.

    python benchmarks/conversations.py [--cases tests/data/followups.jsonl] [--boost 0.5]

With --graded FILE (cases with graded `relevance` judgements and the `whole` question written
out), nDCG@10 over distinct sources for four arms, follow-ups and topic shifts apart:

  alone      the second turn searched by itself
  whole      what the user means, written out as one question
  glued      the two turns joined into one query
  resolved   turn 1 then turn 2 in one conversation (the shipped rules, expansion and boost)

--choose K then chooses the rules (followup.Rules) and the boost by K-fold cross-validation: each
fold's choice is made on the other folds and scored on it, from the rankings each resolution outcome
gives (searched alone, glued, glued + own words fused, each with or without the boost). Two families
of candidates are cross-validated apart: `words` (word exceptions, the word check, the own-topic
rank check) and `clarity` (the cosine of the follow-up's own top hit, `Rules.clear_cosine`); the
family with the better held-out objective is chosen, and its choice on all folds is compared with
the shipped default.

    python benchmarks/conversations.py --graded tests/data/conversations_graded.jsonl --choose 4
    python benchmarks/conversations.py --graded tests/data/conversations_heldout.jsonl
    python benchmarks/conversations.py --graded tests/data/conversations_fresh.jsonl --tenants tests/data/fresh_tenants

With --rows, each case's rankings and topic signals (cosines, the cross-encoder's logits) are saved; benchmarks/conversations_sets.py
chooses the rules leave-one-set-out from several such files (the shipped rules were chosen so).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import statistics
import tempfile
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=Path, default=ROOT / "tests" / "data" / "followups.jsonl")
    parser.add_argument("--tenants", type=Path, default=ROOT / "tenants")
    parser.add_argument("--boost", type=float, default=None, help="override conversations.boost for every tenant")
    parser.add_argument("--graded", type=Path, default=None, help="graded two-turn cases: nDCG@10 per arm")
    parser.add_argument("--choose", type=int, default=None, metavar="K",
                        help="with --graded: choose the rules by K-fold cross-validation")
    parser.add_argument("--rows", type=Path, default=None,
                        help="with --graded: keep the per-case rankings' nDCG in this JSON file, and reuse them "
                             "when it exists (the choice is then recomputed without searching)")
    args = parser.parse_args()
    if args.graded is not None:
        cases = [json.loads(line) for line in args.graded.read_text().splitlines() if line.strip()]
        asyncio.run(graded(cases, args.tenants, args.choose, args.rows))
        return
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


# --- Graded evaluation (nDCG@10) and choosing the rules by cross-validation -------------------

GRADED_LIMIT = 20  # chunks asked for, so that ten distinct sources are usually there to judge
NDCG_AT = 10


def ndcg(sources: list[str], relevance: dict[str, int], at: int = NDCG_AT) -> float:
    """nDCG@at over distinct sources in rank order; gains 2^rel - 1 (graded judgements)."""
    ranked = list(dict.fromkeys(sources))[:at]
    dcg = sum((2 ** relevance.get(s, 0) - 1) / math.log2(rank + 2) for rank, s in enumerate(ranked))
    ideal = sorted(relevance.values(), reverse=True)[:at]
    idcg = sum((2 ** r - 1) / math.log2(rank + 2) for rank, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


AGREE_CHUNKS = (0, 1, 2, 3, 4, 5)  # within the default limit (5), so the check sees what it needs
# all-MiniLM-L6-v2 cosines of a question's best chunk: 0 (off), then steps across the range where
# vague and self-contained questions meet.
CLEAR_COSINES = (0.0, 0.25, 0.275, 0.3, 0.325, 0.35, 0.375, 0.4, 0.45, 0.5)
BOOSTS = (0.0, 0.5)  # no boost, and the boost shipped before (score x 1.5)


@dataclass(frozen=True, slots=True)
class Choice:
    """What the cross-validation chooses: the rules and the tenant's `conversations.boost`."""

    rules: object  # followup.Rules
    boost: float


def candidates(family: str):
    """The candidates of one family (module docstring), each with and without the boost."""
    from gateway.conversations.followup import Rules
    if family == "clarity":
        plain = Rules(existential_there=False, numeral_one=False, empty_it=False, determiner=False, antecedent_words=0,
                      short_alongside=False, min_overlap=0.0, shift_words=0, agree_chunks=0, **_NO_RELATIVE)
        rules = [replace(plain, clear_cosine=c) for c in CLEAR_COSINES]
    else:
        rules = list(candidate_rules())
    return [Choice(r, b) for r in rules for b in BOOSTS]


_NO_RELATIVE = {"relative_clarity": 0.0, "previous_margin": 0.0, "relevance_margin": None, "standalone_margin": None,
                "first_hit_margin": None, "shared_first_margin": None, "clause_words": 0, "measure_it": False,
                "statement_role": "off"}


def candidate_rules():
    """Every combination of the `words` family (the old rules: all off), without the clarity check."""
    from gateway.conversations.followup import Rules
    for there, one, it, det, alongside in itertools.product((False, True), repeat=5):
        for antecedent_words, agree_chunks in itertools.product((0, 2, 3, 4), AGREE_CHUNKS):
            flags = {"existential_there": there, "numeral_one": one, "empty_it": it, "determiner": det,
                     "antecedent_words": antecedent_words, "short_alongside": alongside, "agree_chunks": agree_chunks}
            for check_short in ((False, True) if agree_chunks else (False,)):
                flags["check_short"] = check_short
                yield Rules(**flags, min_overlap=0.0, shift_words=0, clear_cosine=0.0, **_NO_RELATIVE)
                for min_overlap in (0.2, 0.34, 0.5):
                    for shift_words in (0, 3, 4):
                        for topic_sources in (1, 3):
                            yield Rules(**flags, min_overlap=min_overlap, shift_words=shift_words,
                                        topic_sources=topic_sources, clear_cosine=0.0, **_NO_RELATIVE)


def _complexity(choice: Choice) -> int:
    rules = choice.rules
    return sum((rules.existential_there, rules.numeral_one, rules.empty_it, rules.determiner,
                rules.antecedent_words > 0, rules.short_alongside, rules.min_overlap > 0, rules.shift_words > 0,
                rules.agree_chunks > 0, rules.check_short, rules.clear_cosine > 0, rules.relative_clarity > 0,
                rules.previous_margin > 0, choice.boost > 0))


def _label(choice) -> str:
    rules = choice.rules
    on = [name for name in ("existential_there", "numeral_one", "empty_it", "determiner") if getattr(rules, name)]
    label = "+".join(on or ["none"])
    if rules.antecedent_words:
        label += f", antecedent_words={rules.antecedent_words}"
    if rules.clause_words:
        label += f", clause_words={rules.clause_words}"
    if rules.measure_it:
        label += ", measure_it"
    if rules.extraposed_it:
        label += ", extraposed_it"
    if not rules.short_alongside:
        label += ", short_alongside=False"
    if rules.min_overlap:
        label += f", min_overlap={rules.min_overlap}, shift_words={rules.shift_words}, topic_sources={rules.topic_sources}"
    if rules.agree_chunks:
        label += f", agree_chunks={rules.agree_chunks}" + (", check_short" if rules.check_short else "")
    if rules.clear_cosine:
        label += f", clear_cosine={rules.clear_cosine}"
    if rules.relative:
        label += f", relative_clarity={rules.relative_clarity}, previous_margin={rules.previous_margin}"
        if rules.new_relative_clarity > rules.relative_clarity or rules.new_previous_margin > rules.previous_margin:
            label += f", new topic from {max(rules.relative_clarity, rules.new_relative_clarity)}" \
                     f"/{max(rules.previous_margin, rules.new_previous_margin)}"
        if rules.agree_sources:
            label += f", agree_sources={rules.agree_sources} ({rules.agree_role})"
        if rules.relevance_margin is not None:
            label += f", relevance_margin={rules.relevance_margin}"
            if rules.new_relevance_margin is not None and rules.new_relevance_margin > rules.relevance_margin:
                label += f", new topic from {rules.new_relevance_margin}"
        if rules.relevance_closeness is not None:
            label += f", relevance_closeness={rules.relevance_closeness}"
        if rules.relevance:
            label += f", relevance_passages={rules.relevance_passages}" + (", relevance_role=override" if
                                                                          rules.relevance_role == "override" else "")
            if rules.relevance_unshared:
                label += ", relevance_unshared"
        label += f", unsure: fused x{rules.unsure_weight}" if rules.unsure else ", unsure: resolved"
    if rules.standalone_margin is not None:
        label += f", standalone_margin={rules.standalone_margin} (shared: {rules.standalone_shared})"
    if rules.weak_margin is not None:
        label += f", weak_margin={rules.weak_margin}" + (" (new topic from it)" if rules.weak_new else "")
    if rules.absent_short:
        label += ", absent_short"
    if rules.union:
        label += f", union {rules.union_low}..{rules.union_high}" + (" (also shared)" if rules.union_shared else "")
    if rules.relative and rules.unsure and rules.first_hit_margin is not None:
        label += f", first_hit_margin={rules.first_hit_margin} (fused x{rules.first_hit_weight})"
    if rules.band_margin is not None:
        label += f", band_margin={rules.band_margin}"
    if rules.hedge_own_first is not None:
        label += f", hedge_own_first={rules.hedge_own_first}"
    if rules.statement_role != "off":
        label += f", statement_role={rules.statement_role} ({rules.statement_cues})"
    if rules.hedge_weight is not None and (rules.band_margin is not None or rules.hedge_own_first is not None
                                           or rules.statement_role == "unsure"):
        label += f", hedge_weight={rules.hedge_weight}"
    if rules.relative and rules.unsure and rules.shared_first_margin is not None:
        label += f", shared_first_margin={rules.shared_first_margin} (own first below {rules.shared_first_logit})"
    return label + f"; boost={choice.boost}"


# The Rules fields `followup.detect` and `followup.cue` read: the word switches, and whether weak cues apply.
_WORD_FIELDS = ("existential_there", "numeral_one", "empty_it", "extraposed_it", "determiner", "antecedent_words",
                "clause_words", "measure_it", "weak_cues")


def _words_of(rules):
    """`rules` reduced to what the cue detection reads, so that replays of many rule sets share its cache."""
    from gateway.conversations.followup import Rules
    return Rules(**{name: getattr(rules, name) for name in _WORD_FIELDS},
                 weak_margin=None if rules.weak_margin is None else 0.0)


def _detect(query: str, short_query_words: int, rules) -> str | None:
    """`followup.detect`, cached on what it reads of `rules`."""
    return _detected(query, short_query_words, _words_of(rules))


def _cue(query: str, short_query_words: int, rules):
    """`followup.cue`, cached on what it reads of `rules`."""
    return _cue_of(query, short_query_words, _words_of(rules))


@lru_cache(maxsize=None)
def _detected(query: str, short_query_words: int, rules) -> str | None:
    from gateway.conversations.followup import detect
    return detect(query, short_query_words, rules)


@lru_cache(maxsize=None)
def _cue_of(query: str, short_query_words: int, rules):
    from gateway.conversations.followup import cue
    return cue(query, short_query_words, rules)


def _reason(row: dict, rules, short_query_words: int) -> str | None:
    """Why the second turn reads as a follow-up under `rules`, or None when it stands alone (by its words)."""
    from gateway.conversations.followup import new_topic
    reason = _detect(row["turns"][1], short_query_words, rules)
    if reason is None or not rules.min_overlap:
        return reason
    key = ("new_topic", reason, rules.min_overlap, rules.shift_words, rules.topic_sources)
    if key not in row:
        row[key] = new_topic(row["turns"][1], reason, rules, _topic(row, rules.topic_sources)) is not None
    return None if row[key] else reason


def outcome(row: dict, choice: Choice, short_query_words: int) -> float:
    """The nDCG the resolver would reach on this case under `choice` (from the precomputed rankings)."""
    from gateway.conversations.followup import Cue, Topic, agrees, clear_topic, judge_turn, own_topic, settle
    rules = choice.rules
    reason = _reason(row, rules, short_query_words)
    if reason is None and rules.standalone:
        signals = topic_signals(row, rules)
        settled = settle(judge_turn(signals, rules, Cue.NONE)[0], signals, rules, Cue.NONE)
        if settled.topic is Topic.NEW:
            return row["ndcg"]["alone"]
        if settled.topic is Topic.UNSURE:
            return (_fused if settled.hedge else weighted_fusion)(row, settled.weight)
        return row["ndcg"]["glued"]
    if reason is None or clear_topic(row["clarity"], rules.clear_cosine):
        return row["ndcg"]["alone"]
    checked = rules.check_short or reason.startswith("anaphoric")
    if checked and own_topic(row["chunks"]["alone"], row["chunks"]["glued"], row["previous"], rules.agree_chunks):
        return row["ndcg"]["alone"]
    if rules.relative:
        agree = agrees(row["ranked"]["alone"], row["ranked"]["glued"], row["previous"], rules.agree_sources) \
            if rules.agree_sources else None
        signals = topic_signals(row, rules)
        kind = _cue(row["turns"][1], short_query_words, rules)
        settled = settle(judge_turn(signals, rules, kind, agree)[0], signals, rules, kind)
        if settled.topic is Topic.NEW:
            return row["ndcg"]["alone"]
        if settled.hedge and settled.topic is Topic.FOLLOW_UP:
            return row["ndcg"]["anaphor" if choice.boost else "glued"]
        # The rows hold no boosted ranking searched resolved alone: a boosted unsure turn keeps its fusion.
        if settled.topic is Topic.UNSURE or (choice.boost and settled.resolved):
            return row["ndcg"]["short"] if choice.boost else _fused(row, settled.weight)
    if rules.short_alongside and reason.startswith("short query"):
        return row["ndcg"]["short" if choice.boost else "fused"]
    return row["ndcg"]["anaphor" if choice.boost else "glued"]


def _fused(row: dict, weight: float) -> float:
    """nDCG@10 of the resolved and own rankings fused with the resolved one weighing `weight`."""
    return row["ndcg"]["fused"] if weight == 1.0 else weighted_fusion(row, weight)


def topic_signals(row: dict, rules):
    """What `followup.judge_topic` reads, from a saved row: the cosines, and the cross-encoder's best logits
    over the first `rules.relevance_passages` hits of each set (`Conversations.measure`)."""
    from gateway.conversations.followup import TopicSignals
    # The service scores the cross-encoder only for rules that read it (`Rules.relevance`).
    model = (row.get("relevance_model") or {}) if rules.relevance else {}
    n = rules.relevance_passages

    def best(name: str) -> float | None:
        return max(model[name][:n]) if model.get(name) else None

    union = [v for v in (best("glued_on_own"), best("glued_on_previous")) if v is not None]
    # The own words over each ranking's first hit (`Rules.first_hit_margin` and `Rules.shared_first_margin`),
    # scored with the rest of its first hits as the service scores them.
    first_hits = rules.first_hit_margin is not None or rules.shared_first_margin is not None
    first = (model.get("own_on_own") or [None])[0] if first_hits else None
    on_resolved = (model.get("own_on_glued") or [None])[0] if first_hits else None
    return TopicSignals(row["clarity"], row["resolved_clarity"], row["previous_closeness"],
                        own_first=first, own_on_resolved_first=on_resolved,
                        own_relevance=best("own_on_own"), previous_relevance=best("own_on_previous"),
                        union_resolved=max(union) if union else None,
                        resolved_relevance=best("glued_on_glued"),
                        shared=bool(row["chunks"]["alone"]) and row["chunks"]["alone"][0] in row["signals"]["before"][:n],
                        absent=not any(w["in_first"] or w["in_previous_hits"] for w in row["words"])
                        if row["words"] else None, previous_states=_states(row["turns"][0]))


@lru_cache(maxsize=None)
def _states(query: str) -> bool:
    from gateway.conversations.followup import states_situation
    return states_situation(query)


def weighted_fusion(row: dict, weight: float) -> float:
    """nDCG@10 of the resolved (glued) and own rankings fused by RRF with the resolved one weighing
    `weight` (the own one 1), replayed from the saved chunk ids as `pipeline.merge_queries` fuses them."""
    key = ("weighted", weight)
    if key not in row:
        fused: dict[str, float] = {}
        source: dict[str, str] = {}
        for name, w in (("glued", weight), ("alone", 1.0)):
            for rank, (chunk, source_id) in enumerate(zip(row["hit_ids"][name], row["chunks"][name]), start=1):
                fused[chunk] = fused.get(chunk, 0.0) + w / (RRF_K + rank)
                source[chunk] = source_id
        ranked = sorted(fused, key=lambda chunk: (-fused[chunk], chunk))[:GRADED_LIMIT]
        row[key] = ndcg([source[chunk] for chunk in ranked], row["relevance"])
    return row[key]


RRF_K = 60  # pipeline.merge_queries


def _topic(row: dict, sources: int) -> frozenset[str]:
    """The previous topic's stems with the first `sources` of the previous turn's sources."""
    key = f"topic{sources}"
    if key not in row:
        row[key] = frozenset(row["query_stems"]).union(*map(frozenset, row["source_stems"][:sources]))
    return row[key]


def arms(rows: list[dict], resolved) -> dict:
    """Mean nDCG@10 per arm, follow-ups and shifts apart; `resolved(row)` scores the resolved arm."""
    out = {}
    for kind in ("followup", "shift"):
        chosen = [r for r in rows if r["kind"] == kind]
        if not chosen:
            continue
        means = {name: statistics.fmean(r["ndcg"][name] for r in chosen) for name in ("alone", "whole", "glued")}
        means["resolved"] = statistics.fmean(resolved(r) for r in chosen)
        means["cases"] = len(chosen)
        out[kind] = means
    return out


def goals(figures: dict) -> dict:
    """The issue's goals: follow-ups >= 0.85x whole and >= glued; shifts lose <= 0.02 against alone."""
    f, s = figures.get("followup"), figures.get("shift")
    out = {}
    if f:
        out["followup_resolved_over_whole"] = round(f["resolved"] / f["whole"], 3) if f["whole"] else None
        out["followup_resolved_minus_glued"] = round(f["resolved"] - f["glued"], 4)
    if s:
        out["shift_loss_vs_alone"] = round(s["alone"] - s["resolved"], 4)
    return out


def objective(rows: list[dict], choice: Choice, short_query_words: int) -> float:
    """What the choice maximises: mean resolved nDCG of follow-ups plus that of shifts (arms weigh the same)."""
    figures = arms(rows, lambda r: outcome(r, choice, short_query_words))
    return sum(figures[k]["resolved"] for k in figures)


def choose(rows: list[dict], short_query_words: int, family: str) -> Choice:
    """The best candidate of `family` on `rows`; ties go to the simpler choice (fewer exceptions and
    checks), then to the rules that resolve more of `rows`' turns (a result check, not a word list, then
    decides whether a resolved turn is a new topic; a follow-up left standalone has no such safety net),
    then the label."""
    objective_of = {c: round(objective(rows, c, short_query_words), 9) for c in candidates(family)}
    best = max(objective_of.values())
    tied = [c for c, value in objective_of.items() if value == best]
    simplest = min(map(_complexity, tied))
    return min((c for c in tied if _complexity(c) == simplest),
               key=lambda c: (-_resolved(rows, c.rules, short_query_words), _label(c)))


def _resolved(rows: list[dict], rules, short_query_words: int) -> int:
    """How many of `rows`' second turns the rules read as follow-ups (before the checks on hits)."""
    return sum(_reason(row, rules, short_query_words) is not None for row in rows)


def folds(rows: list[dict], k: int) -> list[list[dict]]:
    """k folds stratified by kind (follow-up, shift): each kind's cases dealt round-robin in id order."""
    out: list[list[dict]] = [[] for _ in range(k)]
    for kind in ("followup", "shift"):
        for i, row in enumerate(sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["id"])):
            out[i % k].append(row)
    return out


def _rounded(figures: dict) -> dict:
    return {kind: {name: (round(v, 4) if isinstance(v, float) else v) for name, v in means.items()}
            for kind, means in figures.items()}


def cross_validate(rows: list[dict], k: int, short_query_words: int) -> None:
    pooled_objective = {}
    for family in ("words", "clarity"):
        held_out: dict[str, float] = {}
        for number, test in enumerate(folds(rows, k), start=1):
            train = [r for r in rows if r not in test]
            choice = choose(train, short_query_words, family)
            for row in test:
                held_out[row["id"]] = outcome(row, choice, short_query_words)
            figures = arms(test, lambda r: outcome(r, choice, short_query_words))
            print(json.dumps({"family": family, "fold": number, "train": len(train), "test": len(test),
                              "chosen": _label(choice),
                              "train_objective": round(objective(train, choice, short_query_words), 4),
                              "test": _rounded(figures), "goals": goals(figures)}))
        pooled = arms(rows, lambda r: held_out[r["id"]])
        pooled_objective[family] = sum(pooled[kind]["resolved"] for kind in pooled)
        print(json.dumps({"family": family, "held_out_folds_pooled": _rounded(pooled), "goals": goals(pooled),
                          "objective": round(pooled_objective[family], 4)}, indent=1))
    family = max(pooled_objective, key=pooled_objective.get)
    final = choose(rows, short_query_words, family)
    shipped = _shipped()
    print(json.dumps({"chosen_family": family, "chosen_on_all_folds": _label(final), "shipped_default": _label(shipped),
                      "same": final == shipped}))
    # Where the choice still costs: shifts below searching alone, follow-ups below gluing.
    costs = {r["id"]: round(outcome(r, final, short_query_words) - r["ndcg"]["alone" if r["kind"] == "shift" else "glued"], 3)
             for r in rows}
    print(json.dumps({"below_alone_or_glued": {k: v for k, v in costs.items() if v < 0}}))
    ranking = sorted(candidates(family), key=lambda c: -objective(rows, c, short_query_words))
    print(json.dumps({"top_candidates_on_all": [(_label(c), round(objective(rows, c, short_query_words), 4))
                                                for c in ranking[:8]]}))


def _shipped() -> Choice:
    """The shipped rules and the default boost of `conversations:`."""
    from gateway.conversations.followup import DEFAULT_RULES
    from gateway.tenancy.config import ConversationConfig
    return Choice(DEFAULT_RULES, ConversationConfig().boost)


async def graded(cases: list[dict], tenants: Path, k: int | None, saved: Path | None = None) -> None:
    if saved is not None and saved.exists():
        rows = json.loads(saved.read_text())
        summarise(rows, rows[0]["short_query_words"], k)
        return
    from gateway.conversations.followup import (_STEMS, _WORD, DEFAULT_RULES, _content, boost, clarity,
                                                embedded_clarity, topic_stems)
    from gateway.storage.schema import Scope
    from gateway.ingest.seed import ingest_seeds
    from gateway.retrieval.pipeline import PlannedQuery, merge_queries
    from gateway.routing.searcher import SearchRequest, Searcher
    from gateway.runtime import build_runtime
    from gateway.settings import Settings
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(milvus_uri=str(Path(tmp) / "gateway.db"), tenants_dir=tenants)
        runtime = build_runtime(settings)
        try:
            list(ingest_seeds(runtime))
            searcher = Searcher(runtime.registry, runtime.store, runtime.embedder, settings, tokens=runtime.tokens)
            rows = []
            short_words = set()
            for case in cases:
                principal = Principal(case["tenant"], Role.READER)
                config = runtime.registry.get(case["tenant"]).conversations
                short_words.add(config.short_query_words)
                first, second = case["turns"]

                async def hits(query: str, conversation: str | None = None):
                    result = await searcher.search(principal, SearchRequest(
                        query=query, collection=case["collection"], limit=GRADED_LIMIT,
                        conversation_id=conversation))
                    return list(result.hits), result

                alone, _ = await hits(second)
                whole, _ = await hits(case["whole"])
                glued, _ = await hits(f"{first} {second}")
                cid = f"bench-{uuid.uuid4().hex[:12]}"
                before, _ = await hits(first, cid)
                resolved, result = await hits(second, cid)
                followup = next(s for s in result.trace.stages if s.name == "followUp").detail
                # The previous turn's boosted sources, as the service picks them (turns.Turn.sources).
                previous = list(dict.fromkeys(h.qualified_id.rsplit("/", 1)[0] for h in before[:config.max_hits]))
                previous = previous[:config.boost_sources]
                fused = merge_queries([(PlannedQuery(f"{first} {second}"), glued),
                                       (PlannedQuery(second, kind="followUp:alone"), alone)])[:GRADED_LIMIT]
                rankings = {"alone": alone, "whole": whole, "glued": glued, "resolved": resolved,
                            "anaphor": boost(glued, previous, BOOSTS[-1])[0],
                            "short": boost(fused, previous, BOOSTS[-1])[0], "fused": fused}
                limit = runtime.registry.resolve(case["tenant"], case["collection"]).config.limit
                source_stems = []
                for qualified in previous:
                    namespace, collection, source_id = qualified.split("/", 2)
                    texts = [c.text for c in runtime.store.source_chunks(
                        Scope(case["tenant"], namespace, collection), source_id)]
                    source_stems.append(sorted(topic_stems("", [qualified], texts)))
                row = {"id": case["id"], "kind": case["kind"], "form": case.get("form"), "turns": case["turns"],
                       "query_stems": sorted(topic_stems(first, [])), "source_stems": source_stems,
                       "reason": followup["reason"], "previous": [q.split("/", 2)[2] for q in previous],
                       # The own words' closeness as the service sees it: over the hits of a search at the
                       # collection's limit (embedded when they carry no dense signal).
                       "clarity": (clarity(alone[:limit]) if clarity(alone[:limit]) is not None else
                                   embedded_clarity(runtime.embedder, second, alone[:limit], case["tenant"])),
                       "relevance": case["relevance"],
                       "chunks": {name: [h.source_id for h in ranked] for name, ranked in (("alone", alone), ("glued", glued))},
                       # Each hit's chunk row id, for replaying other fusions of the two rankings (conversations_sets.py).
                       "hit_ids": {name: [h.id for h in ranked] for name, ranked in (("alone", alone), ("glued", glued))},
                       "ranked": {name: list(dict.fromkeys(h.source_id for h in ranked))
                                  for name, ranked in rankings.items()},
                       "ndcg": {name: ndcg([h.source_id for h in ranked], case["relevance"])
                                for name, ranked in rankings.items()}}
                row["signals"] = _signals(runtime.embedder, case["tenant"], first, second, before[:limit],
                                          alone[:limit], glued[:limit])
                # The signals of the relative topic check as the service computes them (followup.judge_topic):
                # the resolved (glued) query's closeness to its own hits, and the turn's closeness to the
                # previous turn's first hits.
                row["resolved_clarity"] = (clarity(glued[:limit]) if clarity(glued[:limit]) is not None else
                                           embedded_clarity(runtime.embedder, f"{first} {second}", glued[:limit],
                                                            case["tenant"]))
                row["previous_closeness"] = embedded_clarity(runtime.embedder, second, before[:limit], case["tenant"])
                row["relevance_model"] = _relevance_signals(first, second, before[:limit], alone[:limit],
                                                            glued[:limit])
                row["words"] = _word_signals(first, second, before[:limit], alone[:limit])
                rows.append(row)
                content = _content([w.lower() for w in _WORD.findall(second)])
                shared = sum(bool(set(_STEMS.terms(w)) & _topic(row, DEFAULT_RULES.topic_sources)) for w in content)
                print(json.dumps({key: row[key] for key in ("id", "kind", "form", "reason")}
                                 | {"in_topic": f"{shared}/{len(content)}"}
                                 | {name: round(v, 3) for name, v in row["ndcg"].items()}))
            if len(short_words) != 1:
                raise SystemExit(f"tenants disagree on short_query_words: {sorted(short_words)}")
            short_query_words = short_words.pop()
            if saved is not None:
                saved.write_text(json.dumps([{k: v for k, v in r.items() if isinstance(k, str) and not k.startswith("topic")}
                                             | {"short_query_words": short_query_words} for r in rows]))
            summarise(rows, short_query_words, k)
        finally:
            runtime.close()


def _cosines(embedder, tenant: str, query: str, texts: list[str]) -> list[float]:
    import numpy as np
    if not texts:
        return []
    q = np.asarray(embedder.embed_query(query, tenant), dtype=np.float32)
    p = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    norms = np.linalg.norm(p, axis=1) * np.linalg.norm(q)
    return [round(float(c), 5) for c in p @ q / np.where(norms > 0, norms, 1.0)]


def _signals(embedder, tenant: str, first: str, second: str, before, alone, glued) -> dict:
    """Signals a turn could be judged by (all-MiniLM-L6-v2 cosines of embedded passages, so that every
    mode reads the same): the second turn against its own first hits, the first turn against its hits,
    the glued query against its hits, the second turn against the first turn's hits and the first turn."""
    from gateway.conversations.followup import CLARITY_PASSAGES
    from gateway.retrieval.hit import passage_text
    n = CLARITY_PASSAGES

    def texts(hits):
        return [t for t in map(passage_text, hits[:n]) if t.strip()]

    return {"own": _cosines(embedder, tenant, second, texts(alone)),
            "first": _cosines(embedder, tenant, first, texts(before)),
            "glued": _cosines(embedder, tenant, f"{first} {second}", texts(glued)),
            "second_on_first_hits": _cosines(embedder, tenant, second, texts(before)),
            "second_on_glued_hits": _cosines(embedder, tenant, second, texts(glued)),
            "turns": _cosines(embedder, tenant, second, [first])[0],
            "alone_scores": [round(h.score, 6) for h in alone[:n]],
            "before": [h.source_id for h in before]}


def _relevance_signals(first: str, second: str, before, alone, glued) -> dict:
    """The bundled cross-encoder's logits (retrieval/stages/cross_encoder.py, at the service's
    TOPIC_TOKENS) for the second turn's own words against their own first hits, the previous turn's
    and the glued query's, and for the glued query against its own first hits: how well each set of
    passages answers each question, read together rather than as two embeddings."""
    from gateway.conversations.followup import CLARITY_PASSAGES, TOPIC_TOKENS
    from gateway.retrieval.hit import passage_text
    from gateway.retrieval.stages.cross_encoder import shared_model
    model = shared_model()
    n = CLARITY_PASSAGES

    def scores(query: str, hits) -> list[float]:
        texts = [t for t in map(passage_text, hits[:n]) if t.strip()]
        return [round(v, 4) for v in model.score(query, texts, TOPIC_TOKENS)] if texts else []

    return {"own_on_own": scores(second, alone), "own_on_previous": scores(second, before),
            "own_on_glued": scores(second, glued), "glued_on_glued": scores(f"{first} {second}", glued),
            "first_on_previous": scores(first, before),
            # The glued query and the first turn over the own words' first hits and the previous turn's:
            # which of the two sets the conversation as a whole, or the first question, is answered by.
            "glued_on_own": scores(f"{first} {second}", alone), "glued_on_previous": scores(f"{first} {second}", before),
            "first_on_own": scores(first, alone)}


def _word_signals(first: str, second: str, before, alone) -> dict:
    """For each content word of the second turn (stemmed as BM25 does): whether it occurs in the first
    turn, in the previous turn's first hits, in its own first hits, and whether "the" precedes it
    (a definite noun phrase may refer back without a pronoun: "how long until the ashes come back?")."""
    from gateway.conversations.followup import _STEMS, _WORD, ANAPHORS, CLARITY_PASSAGES
    from gateway.retrieval.hit import passage_text
    from gateway.storage.analyzer import STOP_WORDS
    n = CLARITY_PASSAGES
    words = [w.lower() for w in _WORD.findall(second)]

    def stems(text: str) -> set[str]:
        return set(_STEMS.terms(text))

    first_stems = stems(first)
    previous = stems(" ".join(map(passage_text, before[:n])))
    own = stems(" ".join(map(passage_text, alone[:n])))
    out = []
    for i, word in enumerate(words):
        if word in STOP_WORDS or word in ANAPHORS:
            continue
        terms = stems(word)
        out.append({"word": word, "definite": i > 0 and words[i - 1] == "the",
                    "in_first": bool(terms & first_stems), "in_previous_hits": bool(terms & previous),
                    "in_own_hits": bool(terms & own)})
    return out


def summarise(rows: list[dict], short_query_words: int, k: int | None) -> None:
    """The four arms with the shipped rules (as the service resolved them), then the choice."""
    shipped = _shipped()
    # The rankings precomputed per outcome must give what the service gave for the shipped rules,
    # or the choice below would score something the service does not do.
    disagree = [r["id"] for r in rows
                if abs(outcome(r, shipped, short_query_words) - r["ndcg"]["resolved"]) > 1e-9]
    figures = arms(rows, lambda r: r["ndcg"]["resolved"])
    old = arms(rows, lambda r: outcome(r, _old_rules(), short_query_words))
    print(json.dumps({"cases": len(rows), "shipped_rules": _label(shipped),
                      "resolved_by_the_service": _rounded(figures), "goals": goals(figures),
                      "old_rules_for_comparison": _rounded(old), "old_goals": goals(old),
                      "precomputed_disagrees_with_service": disagree}, indent=1))
    if k:
        cross_validate(rows, k, short_query_words)


def _old_rules():
    """The rules before `Rules` existed: every anaphoric word points back; short queries also search alone;
    no own-topic check, the boost."""
    from gateway.conversations.followup import Rules
    return Choice(Rules(existential_there=False, numeral_one=False, empty_it=False, determiner=False,
                        antecedent_words=0, short_alongside=True, min_overlap=0.0, shift_words=0, agree_chunks=0,
                        clear_cosine=0.0, **_NO_RELATIVE), BOOSTS[-1])


if __name__ == "__main__":
    main()
