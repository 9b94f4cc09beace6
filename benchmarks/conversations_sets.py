"""Choosing the follow-up topic check leave-one-set-out, across conversational sets of different corpora.

Reads the per-case rankings `benchmarks/conversations.py --graded SET --rows ROWS.json` saved for
each set (no search runs here), and for each set in turn chooses the rules on the other sets and
scores them on it. Two families of candidates:

  absolute  a fixed cosine: a would-be follow-up whose own words find a hit at least this close is a
            new topic (`Rules.clear_cosine`), else it is searched resolved
  relative  `followup.judge_topic`: its own words' closeness relative to the resolved query's
            (`Rules.relative_clarity`) and to the previous turn's hits (`Rules.previous_margin`):
            both pass, a new topic; one, the two rankings fused; neither, resolved. A 0 switches
            that test off, so each test alone is a candidate too.

The objective is the mean, over the sets chosen on (each weighing the same), of the mean resolved
nDCG@10 of follow-ups plus that of topic shifts. Ties go to the middle of the tied candidates in
grid order. Prints each fold (the choice, its figures on the held-out set against the goals), the
held-out mean per family, and each family's choice on all the sets.

    python benchmarks/conversations_sets.py acme=rows_graded.json globex=rows_heldout.json \\
        tickets=rows_unseen.json cycla=rows_fresh.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from conversations import Choice, arms, goals, outcome, _label  # noqa: E402 (benchmarks/ is the script's path)

# all-MiniLM-L6-v2 cosines where vague and self-contained questions meet (0: off).
CLEAR_COSINES = [0.0] + [round(0.25 + 0.0125 * i, 4) for i in range(25)]            # 0.25 .. 0.55
# own / resolved closeness: a vague follow-up's words find theirs at a third to a half of it.
RELATIVE_CLARITIES = [0.0] + [round(0.3 + 0.05 * i, 2) for i in range(15)]           # 0.3 .. 1.0
# own minus the turn's closeness to the previous turn's first hits.
PREVIOUS_MARGINS = [0.0] + [round(0.015 + 0.025 * i, 3) for i in range(16)]          # 0.015 .. 0.39


def candidates(family: str) -> list[Choice]:
    from gateway.conversations.followup import Rules
    plain = Rules(clear_cosine=0.0, relative_clarity=0.0, previous_margin=0.0)
    if family == "absolute":
        return [Choice(replace(plain, clear_cosine=c), 0.0) for c in CLEAR_COSINES]
    return [Choice(replace(plain, relative_clarity=r, previous_margin=m), 0.0)
            for r in RELATIVE_CLARITIES for m in PREVIOUS_MARGINS]


def objective(sets: dict[str, list[dict]], names: list[str], choice: Choice) -> float:
    return statistics.fmean(sum(v["resolved"] for v in arms(sets[n], _scorer(sets[n], choice)).values())
                            for n in names)


def _scorer(rows: list[dict], choice: Choice):
    words = rows[0]["short_query_words"]
    return lambda row: outcome(row, choice, words)


def choose(sets: dict[str, list[dict]], names: list[str], family: str) -> tuple[Choice, float]:
    scored = [(round(objective(sets, names, c), 9), c) for c in candidates(family)]
    best = max(value for value, _ in scored)
    tied = [c for value, c in scored if value == best]
    return tied[len(tied) // 2], best


def _figures(rows: list[dict], choice: Choice) -> dict:
    figures = arms(rows, _scorer(rows, choice))
    return {kind: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in means.items()}
            for kind, means in figures.items()} | {"goals": goals(figures)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", help="NAME=ROWS.json, one per set (benchmarks/conversations.py --rows)")
    args = parser.parse_args()
    sets = {}
    for spec in args.sets:
        name, _, path = spec.partition("=")
        sets[name] = json.loads(Path(path).read_text())
    names = list(sets)
    for family in ("absolute", "relative"):
        held_out = []
        for test in names:
            train = [n for n in names if n != test]
            choice, trained = choose(sets, train, family)
            held_out.append(objective(sets, [test], choice))
            print(json.dumps({"family": family, "held_out": test, "chosen_on": train, "chosen": _label(choice),
                              "train_objective": round(trained, 4), "test": _figures(sets[test], choice)}))
        choice, value = choose(sets, names, family)
        print(json.dumps({"family": family, "held_out_mean_objective": round(statistics.fmean(held_out), 4),
                          "chosen_on_all_sets": _label(choice), "objective_on_all": round(value, 4)}))


if __name__ == "__main__":
    main()
