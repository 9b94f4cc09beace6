"""Choosing the follow-up topic check leave-one-set-out, across conversational sets of different corpora.

Reads the per-case rankings `benchmarks/conversations.py --graded SET --rows ROWS.json` saved for
each set (no search runs here), and for each set in turn chooses the rules on the other sets and
scores them on it. Families of candidates:

  absolute  a fixed cosine: a would-be follow-up whose own words find a hit at least this close is a
            new topic (`Rules.clear_cosine`), else it is searched resolved
  relative  `followup.judge_topic` as it was first chosen: its own words' closeness relative to the
            resolved query's (`Rules.relative_clarity`) and to the previous turn's hits
            (`Rules.previous_margin`): both pass, a new topic; one, the two rankings fused (RRF, equal
            weights); neither, resolved. A 0 switches that test off, so each test alone is a candidate.
  extended  the relative check with what an unsure turn gets and when a turn is a new topic varied:
            the resolved ranking's weight in the fusion of an unsure turn (`Rules.unsure_weight`; 1 is
            plain RRF), or no unsure band at all (one test passed: resolved, `Rules.unsure=False`);
            stricter thresholds for a new topic than for a passed test (`Rules.new_relative_clarity`,
            `Rules.new_previous_margin`: a new topic only when both tests pass by a margin); and a
            third test, agreement (`Rules.agree_sources`): the own words' top source is not one of the
            previous turn's and the resolved query ranks it within its first N sources.
  relevance*  the bundled cross-encoder's margin (`Rules.relevance_margin`: the own words' best logit
            over their own first hits minus over the previous turn's), alone, with its closeness test,
            beside the cosine tests, or overruling them (`relevance_role="override"`); `_k` suffixes
            also read 1 or 2 hits, `_u` ones leave the margin unread when the own first hit is a
            previous source (`relevance_candidates`). The rows carry the logits (conversations.py --rows).
  standalone, weak, absent, cues, union, union_standalone
            today's rules with which turns are judged and how a cue weighs varied (`cue_candidates`): turns
            without a cue judged by the margin (`Rules.standalone_margin`), "there"/"one" as the only cue
            with a threshold of their own (`Rules.weak_margin`), a short query absent from the previous turn
            a new topic (`Rules.absent_short`), the union test (`Rules.union_low`, `union_high`).
  first_hit today's rules with what an unsure turn leans on varied: from a margin between the own words' logit
            over their own first hit and over the resolved ranking's first hit (`Rules.first_hit_margin`, or
            off) the fusion weighs the resolved ranking `Rules.first_hit_weight` (compare with
            `--baseline unleaned`).
  shared_first, shared_first_only
            the third round's rules (`third_round`) with an unsure turn whose own first hit is a previous source,
            answers its own words below a logit (`Rules.shared_first_logit`) and by less than a margin better
            than the resolved ranking's first hit (`Rules.shared_first_margin`, or off) searched resolved alone,
            and (`shared_first`) the margin below which a turn without a cue is a follow-up
            (`Rules.standalone_margin`) varied with it (compare with `--baseline third`).
  inner, inner_only, words, inner_words
            the fourth round's rules (`fourth_round`) with anaphoric words whose reference is inside the turn taken
            for no cue (the turn is then judged as a turn without one): a pronoun after a clause of the turn with
            at least N content words (`Rules.clause_words`), an extraposed "it cost/take to" (`Rules.measure_it`),
            with the standalone margin varied too (`inner`), the first round's word exceptions instead (`words`:
            `existential_there`, `numeral_one`, `empty_it`, `determiner`, `antecedent_words`) or both
            (`inner_words`) (compare with `--baseline fourth`).
  extraposed, word_one, word_sets, standalone5, extraposed_standalone, unsure5
            the fifth round's rules (`fifth_round`) with narrower word exceptions: only the extraposed "is it
            possible to" (`Rules.extraposed_it`), one exception at a time, every subset of the yes/no ones, the
            standalone margin varied, or the extraposition and that margin; `unsure5` what an unsure turn's
            fusion weighs (`Rules.unsure_weight`, `first_hit_weight`, or no fusion) (compare with `--baseline fifth`).
  band, own_first, statement, statement_band, statement_hedge
            the fifth round's rules with a hedge for a turn they let stand alone (`followup.hedged`): a turn without a
            cue fused when its margin is below `Rules.band_margin` (`band`) or its own first hit answers it below
            `Rules.hedge_own_first` (`own_first`); after a previous turn that states a situation and asks nothing,
            such a turn fused or searched resolved, and every judged turn or only those without a cue
            (`Rules.statement_role`, `statement_cues`: `statement`), with the band too (`statement_band`), or only
            fused and only without a cue (`statement_hedge`); each fusion weighing each `Rules.hedge_weight`
            (compare with `--baseline fifth`).

The objective weighs both goals of the issue on each set: the mean resolved nDCG@10 of follow-ups plus
that of topic shifts, minus PENALTY times each shortfall: follow-ups below gluing, follow-ups below 0.85x
the whole question, shifts losing more than 0.02 against searching alone. It is averaged over the sets
chosen on (each weighing the same). Ties go to the middle of the tied candidates in grid order. Prints
each fold (the choice, its figures on the held-out set against the goals), the held-out mean per
family, the baseline (the rules before this choice, the cosine tests alone: `baseline`) on every set
under the same objective, and each family's choice on all the sets.

    python benchmarks/conversations_sets.py acme=rows_acme.json globex=rows_globex.json \\
        tickets=rows_tickets.json cycla=rows_cycla.json halden=rows_halden.json \\
        lindqvist=rows_lindqvist.json brightpaw=rows_brightpaw.json norrvik=rows_norrvik.json
    python benchmarks/conversations_sets.py ... --score final=rows_final.json   # a final check

--baseline names the rules a family must beat: `shipped` (the default), `fifth` (the rules of the fifth round, shipped
until the seventh: `fifth_round`),
`fourth` (the rules of the fourth round), `third` (the rules of the third round), `cued` (those judging only would-be follow-ups), `unleaned`
(those without `first_hit_margin`) or `cosine` (the cosine rules). With --score, the rules chosen on all the
NAME=ROWS sets (the family with the better held-out objective), the baseline, the cosine rules and the
shipped rules are scored once on each --score set.

    python benchmarks/conversations_sets.py <ten sets> --baseline cued \\
        --families standalone,weak,absent,cues,union,union_standalone
    python benchmarks/conversations_sets.py <twelve sets> --baseline unleaned --families first_hit
    python benchmarks/conversations_sets.py <fourteen sets> --baseline third \\
        --families standalone,first_hit,shared_first_only,shared_first
    python benchmarks/conversations_sets.py <sixteen sets> --baseline fourth \\
        --families inner_only,inner,words,inner_words
    python benchmarks/conversations_sets.py <eighteen sets> --baseline fifth \\
        --families extraposed,word_one,word_sets,standalone5,extraposed_standalone
    python benchmarks/conversations_sets.py <twenty sets> --baseline fifth \\
        --families band,own_first,statement,statement_band,statement_hedge
"""

from __future__ import annotations

import argparse
import itertools
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
# The resolved ranking's weight in an unsure turn's fusion (the own words' weighs 1). With RRF's k = 60
# and 20 hits a weight above 80/61 puts every resolved hit ahead of every hit only the own words found.
UNSURE_WEIGHTS = (1.0, 1.1, 1.2, 1.3, 1.5, 2.0)
# How much further than a passed test a new topic must go (ratio of closeness, margin of cosine).
NEW_CLARITY_EXTRA = (0.0, 0.1, 0.2)
NEW_MARGIN_EXTRA = (0.0, 0.05, 0.1)
# Agreement: the resolved query ranks the own words' top source within its first N sources (0: off).
AGREE_SOURCES = (0, 1, 2, 3, 5, 10)
# The cross-encoder margin (`Rules.relevance_margin`, logits: own words over their own first hits minus over
# the previous turn's): follow-ups sit near 0, topic shifts from about 3 to 19.
RELEVANCE_MARGINS = [round(-2.0 + 0.5 * i, 1) for i in range(25)]                   # -2 .. 10
# How much further a new topic's margin must go (`Rules.new_relevance_margin`; between, unsure).
NEW_RELEVANCE_EXTRA = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0)
# Own words over their own first hits minus the resolved query over its own (`Rules.relevance_closeness`).
RELEVANCE_CLOSENESS = [round(-6.0 + 0.5 * i, 1) for i in range(21)]                 # -6 .. 4
# The first hits of each set the cross-encoder reads (`Rules.relevance_passages`).
RELEVANCE_PASSAGES = (1, 2, 3)
# Each shortfall against a goal (nDCG@10) counts this many times more than the same gain in the mean.
PENALTY = 2.0


# Families over the third round's rules (`third_round`), scored by the reference (`conversations.outcome`):
# which turns are judged, how a cue's kind weighs and what an unsure turn leans on (`cue_candidates`).
CUE_FAMILIES = ("standalone", "weak", "absent", "cues", "union", "union_standalone", "first_hit", "shared_first",
                "shared_first_only", "inner", "inner_only", "words", "inner_words", "extraposed", "word_one",
                "word_sets", "standalone5", "extraposed_standalone", "unsure5", "band", "own_first", "statement",
                "statement_band", "statement_hedge")
# A pronoun after a clause of the same turn with at least this many content words refers inside it
# (`Rules.clause_words`; 0: off).
CLAUSE_WORDS = (0, 1, 2, 3, 4, 5)
# The first round's word exceptions over today's rules: a pronoun with at least this many content words
# before it (`Rules.antecedent_words`; 0: off).
ANTECEDENT_WORDS = (0, 3, 4, 5, 6)
# When an unsure turn whose own first hit is a previous source is searched resolved alone (`Rules.shared_first_margin`,
# logits: the own words over their own first hit minus over the resolved ranking's first hit; `shared_first_logit`:
# the own words over their own first hit, below which it answers them poorly).
SHARED_FIRST_MARGINS = [round(-4.0 + 0.5 * i, 1) for i in range(25)]                      # -4 .. 8
SHARED_FIRST_LOGITS = [round(-4.0 + 0.5 * i, 1) for i in range(17)]                       # -4 .. 4
# What an unsure turn leans on (`Rules.first_hit_margin`, logits: the own words over their own first hit minus
# over the resolved ranking's first hit; unsure follow-ups whose rankings lead with different pages score at
# most 7.0, unsure shifts whose glued query lost them 8.6 and 9.8), and the resolved ranking's weight in its fusion then (`Rules.first_hit_weight`).
FIRST_HIT_MARGINS = [round(0.5 * i, 1) for i in range(21)]                              # 0 .. 10
FIRST_HIT_WEIGHTS = (0.5, 0.8, 1.0)
# The union test's thresholds (`Rules.union_low`, `union_high`, logits: own words minus the resolved query
# over both turns' first hits): follow-ups sit at about -4 to -13, most topic shifts at -3 to +8.
UNION_LOW = [round(-8.0 + 0.5 * i, 1) for i in range(25)]                              # -8 .. 4
UNION_HIGH = [round(-2.0 + 0.5 * i, 1) for i in range(21)]                             # -2 .. 8
# What a turn without a cue whose own first hit is a previous source is (`Rules.standalone_shared`).
STANDALONE_SHARED = ("alone", "judge")


def third_round():
    """The rules shipped by the third round (`first_hit`): today's defaults but a turn without a cue judged below
    a margin of 4.5, no shared first hit leaning on the resolved ranking (`Rules.shared_first_margin` off) and every
    pronoun a cue (`fourth_round`).
    The families before the fourth round vary these, so that their commands still reproduce their figures."""
    from gateway.conversations.followup import DEFAULT_RULES
    return replace(_unhedged(DEFAULT_RULES), standalone_margin=4.5, shared_first_margin=None, clause_words=0,
                   measure_it=False)


def inner_candidates(family: str) -> list[Choice]:
    """The fourth round's rules (`fourth_round`) with anaphoric words that refer inside the turn taken for no cue,
    so that the turn is judged by the margin of a turn without a cue (`Rules.standalone_margin`): `inner_only` a
    pronoun after a clause of the turn (`Rules.clause_words`) and an extraposed "it" (`Rules.measure_it`); `inner`
    those with the standalone margin varied; `words` the first round's word exceptions (`existential_there`,
    `numeral_one`, `empty_it`, `determiner`, `antecedent_words`); `inner_words` both sets of exceptions."""
    base = fourth_round()
    inner = list(itertools.product(CLAUSE_WORDS, (False, True)))
    words = list(itertools.product((False, True), (False, True), (False, True), (False, True), ANTECEDENT_WORDS))
    margins = RELEVANCE_MARGINS if family == "inner" else [base.standalone_margin]
    if family == "words":
        inner = inner[:1]
    if family in ("inner", "inner_only"):
        words = words[:1]
    return [Choice(replace(base, clause_words=c, measure_it=m, existential_there=t, numeral_one=o,
                           empty_it=i, determiner=d, antecedent_words=a, standalone_margin=g), 0.0)
            for (c, m), (t, o, i, d, a), g in itertools.product(inner, words, margins)]


def fifth_round():
    """The rules shipped by the fifth round (`inner_only`): the fourth round's with a pronoun after a clause of two
    content words and an extraposed "it cost/take to" not pointing back, no other word exception."""
    from gateway.conversations.followup import DEFAULT_RULES
    return replace(_unhedged(DEFAULT_RULES), clause_words=2, measure_it=True, extraposed_it=False,
                   existential_there=False, numeral_one=False, empty_it=False, determiner=False, antecedent_words=0)


def _unhedged(rules):
    """`rules` without the seventh round's hedges (`followup.hedged`), as every round before it ran."""
    return replace(rules, band_margin=None, hedge_own_first=None, statement_role="off", statement_cues="none",
                   hedge_weight=None)


# The margin up to which a turn without a cue is hedged (`Rules.band_margin`): above the standalone margin (1.5),
# up to where the shifts without a cue thin out (6.8 to 19.4 on the fourteen sets).
BAND_MARGINS = [round(2.0 + 0.5 * i, 1) for i in range(37)]                             # 2 .. 20
# The own words' logit over their own first hit below which such a turn is hedged (`Rules.hedge_own_first`).
HEDGE_OWN_FIRST = [round(-8.0 + 0.5 * i, 1) for i in range(29)]                         # -8 .. 6
# The resolved ranking's weight in a hedged turn's fusion (`Rules.hedge_weight`; None: `unsure_weight`, 1.3).
HEDGE_WEIGHTS = (None, 0.5, 0.8, 1.0, 1.5, 2.0)


def seventh_candidates(family: str) -> list[Choice]:
    """The fifth round's rules (`fifth_round`) with a hedge for a turn they let stand alone (`followup.hedged`):
    `band` a turn without a cue whose margin is below `Rules.band_margin` fused; `own_first` one whose own first
    hit answers it below `Rules.hedge_own_first` fused; `statement` a turn after a previous turn that states a
    situation (`Rules.statement_role`: fused or searched resolved; `statement_cues`: turns without a cue, or every
    judged turn); `statement_band` the statement and the band at once; `statement_hedge` only the statement's hedge
    (fused) on turns without a cue. Each with every `Rules.hedge_weight`, and each hedge also off, so the fifth
    round's rules are a candidate of every family."""
    base = fifth_round()
    statements = [("off", "none")] + [(r, c) for r in ("unsure", "follow-up") for c in ("none", "all")]
    if family == "statement_hedge":
        statements = [("off", "none"), ("unsure", "none")]
    bands = [None] + BAND_MARGINS if family in ("band", "statement_band") else [None]
    firsts = [None] + HEDGE_OWN_FIRST if family == "own_first" else [None]
    if family == "band" or family == "own_first":
        statements = statements[:1]
    out = []
    for (role, cues), band, first, weight in itertools.product(statements, bands, firsts, HEDGE_WEIGHTS):
        fused = band is not None or first is not None or role == "unsure"
        if weight is not None and not fused:
            continue  # the weight of a fusion that never happens
        out.append(Choice(replace(base, statement_role=role, statement_cues=cues, band_margin=band,
                                  hedge_own_first=first, hedge_weight=weight), 0.0))
    return out


def sixth_candidates(family: str) -> list[Choice]:
    """The fifth round's rules (`fifth_round`) with narrower word exceptions than round 9's `inner_words`:
    `extraposed` only the extraposition of `empty_it` ("is it possible to ...", `Rules.extraposed_it`);
    `word_one` one exception at a time (or none); `word_sets` every subset of the four yes/no exceptions and
    the extraposition; `standalone5` the margin of a turn without a cue (`Rules.standalone_margin`) varied;
    `extraposed_standalone` both; `unsure5` what an unsure turn gets."""
    base = fifth_round()
    if family == "extraposed":
        return [Choice(replace(base, extraposed_it=e), 0.0) for e in (False, True)]
    if family == "word_one":
        one = [{}] + [{name: True} for name in ("extraposed_it", "empty_it", "existential_there", "numeral_one",
                                                "determiner")] + [{"antecedent_words": a} for a in ANTECEDENT_WORDS[1:]]
        return [Choice(replace(base, **change), 0.0) for change in one]
    if family == "word_sets":
        return [Choice(replace(base, extraposed_it=x, empty_it=i, existential_there=t, numeral_one=o, determiner=d), 0.0)
                for x, i, t, o, d in itertools.product((False, True), repeat=5) if not (x and i)]
    if family == "unsure5":
        # What an unsure turn gets: fused with the resolved ranking weighing each of UNSURE_WEIGHTS (and, when its own
        # first hit answers it better, FIRST_HIT_WEIGHTS), or searched resolved (`Rules.unsure` off).
        return [Choice(replace(base, unsure=False), 0.0)] + [
            Choice(replace(base, unsure_weight=w, first_hit_weight=f), 0.0)
            for w, f in itertools.product(UNSURE_WEIGHTS, FIRST_HIT_WEIGHTS)]
    extraposed = (False, True) if family == "extraposed_standalone" else (False,)
    return [Choice(replace(base, extraposed_it=x, standalone_margin=g), 0.0)
            for x, g in itertools.product(extraposed, RELEVANCE_MARGINS)]


def fourth_round():
    """The rules shipped by the fourth round (`shared_first`): today's defaults but every pronoun a cue
    (`Rules.clause_words`, `Rules.measure_it` off)."""
    from gateway.conversations.followup import DEFAULT_RULES
    return replace(_unhedged(DEFAULT_RULES), clause_words=0, measure_it=False)


def cue_candidates(family: str) -> list[Choice]:
    """The third round's rules (`third_round`) with `standalone` (every turn judged: a turn without a cue is a
    follow-up below a margin threshold of its own, `Rules.standalone_margin`), `weak` ("there"/"one" as the only
    cue: their own margin threshold, `Rules.weak_margin`, from which they are a new topic or left to the cosine
    tests), `absent` (a short query none of whose words occur in the previous turn is a new topic) or all three
    (`cues`); `first_hit`, `union*` and `shared_first*` as the module docstring says. Each option also off
    (None), so those rules are a candidate of every family."""
    if family.startswith("inner") or family == "words":
        return inner_candidates(family)
    if family in ("extraposed", "word_one", "word_sets", "standalone5", "extraposed_standalone", "unsure5"):
        return sixth_candidates(family)
    if family in ("band", "own_first", "statement", "statement_band", "statement_hedge"):
        return seventh_candidates(family)
    base = third_round()
    if family.startswith("shared_first"):
        # With the standalone margin too (`shared_first`), or that margin kept at 4.5 (`shared_first_only`).
        margins = [4.5] if family == "shared_first_only" else RELEVANCE_MARGINS
        return [Choice(replace(base, standalone_margin=m), 0.0) for m in margins] + [
            Choice(replace(base, standalone_margin=m, shared_first_margin=g, shared_first_logit=a), 0.0)
            for m, g, a in itertools.product(margins, SHARED_FIRST_MARGINS, SHARED_FIRST_LOGITS)]
    if family == "first_hit":
        return [Choice(replace(base, first_hit_margin=None), 0.0)] + [
            Choice(replace(base, first_hit_margin=m, first_hit_weight=w), 0.0)
            for m, w in itertools.product(FIRST_HIT_MARGINS, FIRST_HIT_WEIGHTS)]
    if family.startswith("union"):
        # With the standalone margin too, every grid at steps of 1 (the product stays near 5,000 candidates).
        both = family == "union_standalone"
        standalone = [None] + (RELEVANCE_MARGINS[::2] if both else [])
        low, high = (UNION_LOW[::2], UNION_HIGH[::2]) if both else (UNION_LOW, UNION_HIGH)
        out = []
        for lo, hi, shared, m in itertools.product([None, *low], [None, *high], (False, True), standalone):
            if (lo is not None and hi is not None and hi < lo) or (shared and lo is None and hi is None):
                continue
            out.append(Choice(replace(base, union_low=lo, union_high=hi, union_shared=shared,
                                      standalone_margin=m), 0.0))
        return out
    standalone = [(None, "alone")] + [(m, shared) for m in RELEVANCE_MARGINS for shared in STANDALONE_SHARED]
    weak = [(None, False)] + [(m, new) for m in RELEVANCE_MARGINS for new in (False, True)]
    absent = (False, True)
    grids = {"standalone": (standalone, weak[:1], absent[:1]), "weak": (standalone[:1], weak, absent[:1]),
             "absent": (standalone[:1], weak[:1], absent), "cues": (standalone, weak, absent)}[family]
    return [Choice(replace(base, standalone_margin=m, standalone_shared=shared, weak_margin=w,
                           weak_new=new, absent_short=a), 0.0)
            for (m, shared), (w, new), a in itertools.product(*grids)]


def candidates(family: str) -> list[Choice]:
    from gateway.conversations.followup import Rules
    if family in CUE_FAMILIES:
        return cue_candidates(family)
    plain = Rules(clear_cosine=0.0, relative_clarity=0.0, previous_margin=0.0, unsure_weight=1.0, statement_role="off",
                  relevance_margin=None, relevance_role="test", relevance_unshared=False, standalone_margin=None,
                  first_hit_margin=None, shared_first_margin=None, clause_words=0, measure_it=False)
    if family == "absolute":
        return [Choice(replace(plain, clear_cosine=c), 0.0) for c in CLEAR_COSINES]
    if family == "relative":
        return [Choice(replace(plain, relative_clarity=r, previous_margin=m), 0.0)
                for r in RELATIVE_CLARITIES for m in PREVIOUS_MARGINS]
    if family.startswith("relevance"):
        return relevance_candidates(family, plain)
    if family == "weight":
        # Today's two tests kept; only what an unsure turn gets is chosen.
        from gateway.conversations.followup import DEFAULT_RULES
        base = replace(plain, relative_clarity=DEFAULT_RULES.relative_clarity,
                       previous_margin=DEFAULT_RULES.previous_margin)
        return [Choice(replace(base, unsure=False), 0.0)] + [Choice(replace(base, unsure_weight=w), 0.0)
                                                           for w in UNSURE_WEIGHTS]
    # Sub-families of `extended`, each with the unsure turn's weight varied: `unsure` alone, `strict`
    # (with the new-topic thresholds), `agree` (with the agreement test).
    strict = family in ("strict", "extended")
    agreeing = family in ("agree", "extended")
    out = []
    for r, m in itertools.product(RELATIVE_CLARITIES, PREVIOUS_MARGINS):
        if not r and not m:
            continue
        for extra_r, extra_m, agree, role in itertools.product(
                NEW_CLARITY_EXTRA if strict else (0.0,), NEW_MARGIN_EXTRA if strict else (0.0,),
                AGREE_SOURCES if agreeing else (0,), ("require", "promote", "decide")):
            if (extra_r and not r) or (extra_m and not m) or (role != "require" and not agree):
                continue
            base = replace(plain, relative_clarity=r, previous_margin=m, agree_sources=agree, agree_role=role,
                           new_relative_clarity=round(r + extra_r, 3) if r else 0.0,
                           new_previous_margin=round(m + extra_m, 3) if m else 0.0)
            out.append(Choice(replace(base, unsure=False), 0.0))
            if role == "decide":
                continue  # no turn stays unsure
            out.extend(Choice(replace(base, unsure_weight=w), 0.0) for w in UNSURE_WEIGHTS)
    return out


def relevance_candidates(family: str, plain) -> list[Choice]:
    """The cross-encoder families: `relevance` (its margin test alone: a new topic from `hi`, a follow-up
    below `lo`, unsure between), `relevance_closeness` (with its closeness test too), `relevance_cosine`
    (with the embedder's relative closeness and, at today's 0.165 or off, its margin test). Each with every
    unsure option (resolved, or fused with the resolved ranking weighing each of UNSURE_WEIGHTS) and every
    number of passages read."""
    from gateway.conversations.followup import DEFAULT_RULES
    # The three first hits of each set, as the cosines read (followup.CLARITY_PASSAGES): with one, a turn
    # whose own first two hits are the previous turn's in the other order scores a large margin. A family
    # ending in `_k` also tries one and two.
    passages = RELEVANCE_PASSAGES if family.endswith("_k") else (3,)
    family = family.removesuffix("_k")
    # Ending in `_u`: the margin is not read when the own words' first hit is from the previous turn's
    # sources (`Rules.relevance_unshared`).
    unshared = family.endswith("_u")
    family = family.removesuffix("_u")
    out = []
    cosine = [(0.0, 0.0)]
    closeness = [None]
    extras = NEW_RELEVANCE_EXTRA
    if family == "relevance_closeness":
        closeness = RELEVANCE_CLOSENESS
    elif family == "relevance_today":
        # Today's rules kept whole (their two tests, an unsure turn fused at 1.3); the cross-encoder's
        # margin only overrules them where it is clear: below `lo` a follow-up, from `high` a new topic.
        today = cosine_rules().rules
        for lo, high, n in itertools.product([None, *RELEVANCE_MARGINS], [None, *RELEVANCE_MARGINS, 12.0, 14.0],
                                             passages):
            if (lo is None and high is None) or (lo is not None and high is not None and high < lo):
                continue
            out.append(Choice(replace(today, relevance_role="override", relevance_margin=-1e9 if lo is None else lo,
                                      new_relevance_margin=high, relevance_passages=n, relevance_unshared=unshared), 0.0))
        return out
    elif family in ("relevance_override", "relevance_override_grid"):
        from gateway.conversations.followup import Rules
        today = cosine_rules().rules
        grid = [(today.relative_clarity, today.previous_margin)] if family == "relevance_override" else \
            [(r, m) for r in (0.0, 0.4, 0.5, 0.6, 0.7) for m in (0.0, 0.115, 0.165, 0.215)]
        for (r, m), lo, high, n in itertools.product(grid, [None, *RELEVANCE_MARGINS],
                                                    [None, *RELEVANCE_MARGINS, 12.0, 14.0], passages):
            if (lo is None and high is None) or (lo is not None and high is not None and high < lo) or (not r and not m):
                continue
            base = replace(plain, relative_clarity=r, previous_margin=m, relevance_role="override",
                           relevance_margin=-1e9 if lo is None else lo, new_relevance_margin=high,
                           relevance_passages=n, relevance_unshared=unshared)
            out.append(Choice(replace(base, unsure=False), 0.0))
            out.extend(Choice(replace(base, unsure_weight=w), 0.0) for w in UNSURE_WEIGHTS)
        return out
    elif family == "relevance_cosine":
        cosine = [(r, m) for r in RELATIVE_CLARITIES for m in (0.0, DEFAULT_RULES.previous_margin)]
        extras = (0.0, 2.0, 4.0)
    for (r, m), c, lo, extra, n in itertools.product(cosine, closeness, RELEVANCE_MARGINS, extras, passages):
        base = replace(plain, relative_clarity=r, previous_margin=m, relevance_margin=lo,
                       new_relevance_margin=lo + extra, relevance_closeness=c, relevance_passages=n,
                       relevance_unshared=unshared)
        out.append(Choice(replace(base, unsure=False), 0.0))
        out.extend(Choice(replace(base, unsure_weight=w), 0.0) for w in UNSURE_WEIGHTS)
    return out


def baseline(name: str = "shipped") -> Choice:
    """What a family must beat to be shipped: today's shipped rules (`followup.DEFAULT_RULES`); "fifth" the rules of
    the fifth round (`fifth_round`: the seventh round's hedge off), "fourth" the rules
    of the fourth round (`fourth_round`), "third" the rules of the third round (`third_round`), "cued" those
    judging only cued turns (`Rules.standalone_margin` off),
    "unleaned" those without the first hits' arbitration (`Rules.first_hit_margin` off), "cosine" the cosine
    rules."""
    from conversations import _shipped
    if name == "cosine":
        return cosine_rules()
    shipped = _shipped()
    if name == "fourth":
        return replace(shipped, rules=fourth_round())
    if name == "fifth":
        return replace(shipped, rules=fifth_round())
    if name in ("third", "cued", "unleaned"):
        shipped = replace(shipped, rules=third_round())
    if name == "unleaned":
        return replace(shipped, rules=replace(shipped.rules, first_hit_margin=None))
    return replace(shipped, rules=replace(shipped.rules, standalone_margin=None)) if name == "cued" else shipped


def cosine_rules() -> Choice:
    """The rules shipped before the cross-encoder's tests (the relative check at 0.5 and 0.165, an unsure
    turn fused with the resolved ranking weighing 1.3): an arm of the tables, and the base of the
    `relevance_today`, `relevance_override` families."""
    from gateway.conversations.followup import Rules
    return Choice(Rules(relative_clarity=0.5, previous_margin=0.165, unsure_weight=1.3, relevance_margin=None,
                        new_relevance_margin=None, relevance_closeness=None, relevance_role="test",
                        relevance_unshared=False, standalone_margin=None, first_hit_margin=None,
                        shared_first_margin=None, clause_words=0, measure_it=False, statement_role="off"), 0.0)


def set_score(rows: list[dict], choice: Choice) -> float:
    """One set's objective: the two resolved means less PENALTY x the shortfalls against the goals."""
    figures = arms(rows, _scorer(rows, choice))
    return sum(v["resolved"] for v in figures.values()) - PENALTY * shortfall(figures)


def shortfall(figures: dict) -> float:
    """How far the figures fall short of the goals, summed (0: every goal met)."""
    out = 0.0
    if f := figures.get("followup"):
        out += max(0.0, f["glued"] - f["resolved"]) + max(0.0, 0.85 * f["whole"] - f["resolved"])
    if s := figures.get("shift"):
        out += max(0.0, s["alone"] - s["resolved"] - 0.02)
    return out


def _scorer(rows: list[dict], choice: Choice):
    words = rows[0]["short_query_words"]
    return lambda row: outcome(row, choice, words)


class Features:
    """One set's rows as arrays, so that the relative family's many candidates are scored at once.

    `outcome` (benchmarks/conversations.py) is the reference: it follows the service's code;
    `Table` checks that the two agree on a sample of candidates and on every chosen one.
    """

    def __init__(self, rows: list[dict]) -> None:
        import numpy as np
        from conversations import _reason, weighted_fusion
        from gateway.conversations.followup import Rules, agrees
        words = rows[0]["short_query_words"]
        plain = Rules(clear_cosine=0.0, relative_clarity=0.0, previous_margin=0.0, relevance_margin=None,
                      standalone_margin=None, first_hit_margin=None, shared_first_margin=None, clause_words=0,
                      measure_it=False, statement_role="off")
        self.followup = np.array([r["kind"] == "followup" for r in rows])
        self.checked = np.array([_reason(r, plain, words) is not None for r in rows])
        own = np.array([np.nan if r["clarity"] is None else r["clarity"] for r in rows])
        resolved = np.array([np.nan if r["resolved_clarity"] is None else r["resolved_clarity"] for r in rows])
        previous = np.array([0.0 if r["previous_closeness"] is None else r["previous_closeness"] for r in rows])
        self.judged = ~np.isnan(own)
        self.ratio_on = ~np.isnan(resolved) & (np.nan_to_num(resolved) > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.ratio = np.where(self.ratio_on & self.judged, own / np.where(self.ratio_on, resolved, 1.0), -np.inf)
        self.margin = np.where(self.judged, own - previous, -np.inf)
        self.agree = {k: np.array([agrees(r["ranked"]["alone"], r["ranked"]["glued"], r["previous"], k) for r in rows])
                      for k in AGREE_SOURCES if k}
        from conversations import topic_signals
        self.relevance = {}
        self.shared = {}
        for n in RELEVANCE_PASSAGES:
            signals = [topic_signals(r, replace(plain, relevance_passages=n, relevance_margin=0.0)) for r in rows]
            self.relevance[n] = tuple(np.array([np.nan if v is None else v for v in values]) for values in (
                [s.own_relevance for s in signals], [s.previous_relevance for s in signals],
                [s.resolved_relevance for s in signals]))
            self.shared[n] = np.array([s.shared for s in signals])
        self.alone = np.array([r["ndcg"]["alone"] for r in rows])
        self.glued = np.array([r["ndcg"]["glued"] for r in rows])
        self.fused = {w: np.array([r["ndcg"]["fused"] if w == 1.0 else weighted_fusion(r, w) for r in rows])
                      for w in UNSURE_WEIGHTS}
        self.means = {kind: {name: float(getattr(self, name)[mask].mean()) if name != "whole" else
                             statistics.fmean(r["ndcg"]["whole"] for r, m in zip(rows, mask) if m)
                             for name in ("alone", "glued", "whole")}
                      for kind, mask in (("followup", self.followup), ("shift", ~self.followup)) if mask.any()}

    def values(self, rules):
        """Each row's nDCG@10 under `rules` (the relative check; the word rules as shipped)."""
        import numpy as np
        judged = self.judged
        tests = []  # (runs, passes, passes by the new-topic threshold), as followup.judge_topic adds them
        tests.append((self.ratio_on & (rules.relative_clarity > 0), self.ratio >= rules.relative_clarity,
                      self.ratio >= max(rules.relative_clarity, rules.new_relative_clarity)))
        tests.append((np.full(self.margin.shape, rules.previous_margin > 0), self.margin >= rules.previous_margin,
                      self.margin >= max(rules.previous_margin, rules.new_previous_margin)))
        override = None
        unread_unsure = None
        if rules.relevance:
            own, previous, resolved = self.relevance[rules.relevance_passages]
            if not rules.cosines:
                judged = ~np.isnan(own)
            if rules.relevance_unshared:
                unread = self.shared[rules.relevance_passages]
                if not rules.cosines and rules.relevance_closeness is None:
                    unread_unsure = unread
                nan = np.full(own.shape, np.nan)
                previous = np.where(unread, nan, previous)
                resolved = np.where(unread, nan, resolved)
                own = np.where(unread, nan, own)
            with np.errstate(invalid="ignore"):
                if rules.relevance_margin is not None and rules.relevance_role == "override":
                    on = ~np.isnan(own) & ~np.isnan(previous)
                    margin = np.where(on, own - previous, 0.0)
                    high = np.inf if rules.new_relevance_margin is None else rules.new_relevance_margin
                    override = (on & (margin < rules.relevance_margin),
                                on & (margin >= rules.relevance_margin) & (margin >= high))
                elif rules.relevance_margin is not None:
                    margin = np.where(np.isnan(own) | np.isnan(previous), -np.inf, own - previous)
                    bar = rules.relevance_margin if rules.new_relevance_margin is None else rules.new_relevance_margin
                    tests.append((~np.isnan(own) & ~np.isnan(previous), margin >= rules.relevance_margin,
                                  margin >= max(rules.relevance_margin, bar)))
                if rules.relevance_closeness is not None:
                    gap = np.where(np.isnan(own) | np.isnan(resolved), -np.inf, own - resolved)
                    tests.append((~np.isnan(own) & ~np.isnan(resolved), gap >= rules.relevance_closeness,
                                  gap >= rules.relevance_closeness))
        passed = np.zeros(self.margin.shape, dtype=bool)
        new = np.ones(self.margin.shape, dtype=bool)
        ran = np.zeros(self.margin.shape, dtype=bool)
        for on, ok, clear in tests:
            passed |= on & ok
            new &= clear | ~on
            ran |= on
        new &= ran
        if override is not None:
            follow, promoted = override
            new = (new & ~follow) | promoted
            passed = passed & ~follow & ~promoted
        if unread_unsure is not None:
            new &= ~unread_unsure
            passed |= unread_unsure
        if rules.agree_sources:
            agree = self.agree[rules.agree_sources]
            if rules.agree_role == "require":
                new = new & agree
            else:
                new = new | (agree & passed)
        new &= judged
        unsure = ~new & passed & judged & rules.unsure & (rules.agree_role != "decide" or not rules.agree_sources)
        return np.where(~self.checked | new, self.alone, np.where(unsure, self.fused[rules.unsure_weight], self.glued))

    def score(self, rules) -> float:
        values = self.values(rules)
        out = 0.0
        figures = {}
        for kind, mask in (("followup", self.followup), ("shift", ~self.followup)):
            if mask.any():
                figures[kind] = self.means[kind] | {"resolved": float(values[mask].mean())}
                out += figures[kind]["resolved"]
        return out - PENALTY * shortfall(figures)


class Table:
    """Every candidate's objective on every set, computed once (folds then only add them up)."""

    def __init__(self, sets: dict[str, list[dict]], family: str) -> None:
        self.candidates = candidates(family)
        self.sets = sets
        if family == "absolute" or family in CUE_FAMILIES:
            self.scores = {name: [set_score(rows, c) for c in self.candidates] for name, rows in sets.items()}
            return
        features = {name: Features(rows) for name, rows in sets.items()}
        self.scores = {name: [f.score(c.rules) for c in self.candidates] for name, f in features.items()}
        # The arrays must score what the reference (the service's logic) scores.
        for i in range(0, len(self.candidates), max(1, len(self.candidates) // 40)):
            self._check(self.candidates[i], i)

    def _check(self, choice: Choice, i: int | None = None) -> None:
        i = self.candidates.index(choice) if i is None else i
        for name, rows in self.sets.items():
            reference = set_score(rows, choice)
            if abs(reference - self.scores[name][i]) > 1e-9:
                raise SystemExit(f"arrays disagree with the reference on {name} for {_label(choice)}: "
                                 f"{self.scores[name][i]} against {reference}")

    def choose(self, names: list[str]) -> tuple[Choice, float]:
        totals = [round(statistics.fmean(self.scores[n][i] for n in names), 9) for i in range(len(self.candidates))]
        best = max(totals)
        tied = [c for value, c in zip(totals, self.candidates) if value == best]
        chosen = tied[len(tied) // 2]
        self._check(chosen)
        return chosen, best


def _figures(rows: list[dict], choice: Choice) -> dict:
    figures = arms(rows, _scorer(rows, choice))
    return {kind: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in means.items()}
            for kind, means in figures.items()} | {"goals": goals(figures),
                                                   "objective": round(set_score(rows, choice), 4)}


def _pooled(sets: dict[str, list[dict]], choice: Choice) -> dict:
    """`choice`'s figures over every turn of `sets` together: each arm's mean weighted by its cases, so that a
    set of 12 shifts and one of 23 count by their turns, with the goals on them."""
    per_set = [arms(rows, _scorer(rows, choice)) for rows in sets.values()]
    pooled = {}
    for kind in ("followup", "shift"):
        parts = [figures[kind] for figures in per_set if kind in figures]
        cases = sum(part["cases"] for part in parts)
        if cases:
            pooled[kind] = {arm: round(sum(part[arm] * part["cases"] for part in parts) / cases, 4)
                            for arm in ("alone", "whole", "glued", "resolved")} | {"cases": cases}
    return pooled | {"goals": goals(pooled)}


def _read(specs: list[str]) -> dict[str, list[dict]]:
    sets = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        sets[name] = json.loads(Path(path).read_text())
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", help="NAME=ROWS.json, one per set (benchmarks/conversations.py --rows)")
    parser.add_argument("--families", default="absolute,relative,weight,unsure,strict,agree,extended,relevance,"
                        "relevance_k,relevance_closeness,relevance_cosine,relevance_override,relevance_override_u,"
                        "relevance_today,relevance_today_k,relevance_today_u")
    parser.add_argument("--baseline", choices=("shipped", "fifth", "fourth", "third", "cued", "unleaned", "cosine"),
                        default="shipped", help="the rules a family must beat (baseline())")
    parser.add_argument("--score", nargs="*", default=[], metavar="NAME=ROWS.json",
                        help="final sets: score the rules chosen on all the sets (and the baseline's) once on each")
    args = parser.parse_args()
    from conversations import _shipped
    sets = _read(args.sets)
    names = list(sets)
    base = baseline(args.baseline)
    base_mean = statistics.fmean(set_score(sets[n], base) for n in names)
    print(json.dumps({"baseline": _label(base), "held_out": {n: _figures(sets[n], base) for n in names},
                      "held_out_mean_objective": round(base_mean, 4)}))
    held_means, finals, dominating = {}, {}, {}
    for family in args.families.split(","):
        table = Table(sets, family)
        held_out, choices = [], []
        for test in names:
            train = [n for n in names if n != test]
            choice, trained = table.choose(train)
            held_out.append(set_score(sets[test], choice))
            choices.append(choice)
            print(json.dumps({"family": family, "held_out": test, "chosen_on": train, "chosen": _label(choice),
                              "train_objective": round(trained, 4), "test": _figures(sets[test], choice),
                              "baseline_on_it": round(set_score(sets[test], base), 4)}))
        choice, value = table.choose(names)
        held_means[family], finals[family] = statistics.fmean(held_out), choice
        # Shipped only if no held-out fold falls further short of the goals than the baseline do on that
        # set, and the held-out mean objective is at least the baseline's.
        short = [shortfall(arms(sets[n], _scorer(sets[n], c))) for n, c in zip(names, choices)]
        dominating[family] = held_means[family] >= base_mean - 1e-9 and all(
            s <= shortfall(arms(sets[n], _scorer(sets[n], base))) + 1e-9 for n, s in zip(names, short))
        print(json.dumps({"family": family, "held_out_mean_objective": round(held_means[family], 4),
                          "no_fold_short_of_goals_beyond_baseline": dominating[family],
                          "every_fold_objective_at_least_baseline": all(
                              score >= set_score(sets[n], base) - 1e-9 for n, score in zip(names, held_out)),
                          "chosen_on_all_sets": _label(choice), "objective_on_all": round(value, 4),
                          "on_each_set": {n: _figures(sets[n], choice) for n in names}}))
    eligible = [f for f in held_means if dominating[f]]
    family = max(eligible, key=held_means.get) if eligible else None
    print(json.dumps({"shipped_family": family, "rules": _label(finals[family]) if family else _label(base),
                      "rule": "the best held-out mean among families whose held-out mean is at least the baseline's and "
                              "whose every held-out fold falls no further short of the goals than the baseline's"}))
    print(json.dumps({"pooled": "the shipped rules over every turn of the sets chosen on",
                      "sets": names, "figures": _pooled(sets, _shipped())}))
    if args.score:
        family = family or max(held_means, key=held_means.get)
        finals_read = _read(args.score)
        print(json.dumps({"pooled": "the shipped rules over every turn of the final sets",
                          "sets": list(finals_read), "figures": _pooled(finals_read, _shipped())}))
        for name, rows in finals_read.items():
            print(json.dumps({"final_set": name, "family": family, "chosen": _label(finals[family]),
                              "chosen_figures": _figures(rows, finals[family]), "baseline": _figures(rows, base),
                              "cosine_rules": _figures(rows, cosine_rules()),
                              "shipped": _label(_shipped()), "shipped_figures": _figures(rows, _shipped())}))


if __name__ == "__main__":
    main()
