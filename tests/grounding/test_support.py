"""The support check: verdicts at the thresholds, the per-call bound, what `valid` then means, and the
bundled model on the demo case."""

from pathlib import Path

import pytest

from gateway.grounding.citations import (
    CitationStatus,
    Evidence,
    SupportThresholds,
    SupportVerdict,
    validate_citations,
)
from gateway.grounding.support import MAX_TOKENS, THRESHOLDS, check_support, claim, verdict

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = [Evidence("a.md", "0", "Alpha is one."), Evidence("b.md", "0", "Beta is two.")]


class TableScorer:
    """Scores from a table keyed by (sentence, passage); records every call."""

    def __init__(self, table: dict[tuple[str, str], float]) -> None:
        self.table = table
        self.calls: list[tuple[str, list[str], int]] = []

    def score(self, query: str, passages, max_tokens: int) -> list[float]:
        self.calls.append((query, list(passages), max_tokens))
        return [self.table[(query, p)] for p in passages]


def test_verdicts_at_the_thresholds():
    limits = SupportThresholds(supported_at=2.0, weak_at=-1.0)
    assert [verdict(s, limits) for s in (2.0, 1.99, -1.0, -1.01)] == [
        SupportVerdict.SUPPORTED, SupportVerdict.WEAK, SupportVerdict.WEAK, SupportVerdict.UNSUPPORTED]
    assert THRESHOLDS.weak_at < THRESHOLDS.supported_at


def test_each_valid_citation_gets_its_sentence_and_chunk_scored():
    report = validate_citations("Alpha is one [a.md/0] [b.md/0]. Beta is \"two\" [b.md/0]. Gone [c.md/0].",
                                EVIDENCE)
    scorer = TableScorer({("Alpha is one .", "Alpha is one."): 5.0, ("Alpha is one .", "Beta is two."): -4.0,
                          ('Beta is "two" .', "Beta is two."): 0.5})
    checked = check_support(report, EVIDENCE, scorer)
    assert [(c.source_id, c.support and c.support.verdict) for c in checked.citations] == [
        ("a.md", SupportVerdict.SUPPORTED), ("b.md", SupportVerdict.UNSUPPORTED), ("b.md", SupportVerdict.WEAK),
        ("c.md", None)]
    assert checked.citations[0].support.score == 5.0 and checked.citations[0].support.thresholds == THRESHOLDS
    # One model call per sentence, markers stripped, at the check's token budget; unknown ones never scored.
    assert [(q, len(p), t) for q, p, t in scorer.calls] == [("Alpha is one .", 2, MAX_TOKENS),
                                                            ('Beta is "two" .', 1, MAX_TOKENS)]
    assert checked.unchecked == 0
    assert not checked.valid  # an UNSUPPORTED citation (and the UNKNOWN one)


def test_weak_support_keeps_an_answer_valid_and_unsupported_does_not():
    report = validate_citations("Alpha is one [a.md/0].", EVIDENCE)
    for score, valid in ((THRESHOLDS.weak_at, True), (THRESHOLDS.weak_at - 0.01, False)):
        checked = check_support(report, EVIDENCE, TableScorer({("Alpha is one .", "Alpha is one."): score}))
        assert checked.valid is valid


def test_at_most_max_checks_pairs_are_scored_and_the_rest_counted():
    evidence = [Evidence(f"s{i}", "0", f"Fact {i}.") for i in range(6)]
    answer = " ".join(f"Fact {i} [s{i}/0]." for i in range(6)) + " Fact 0 again [s0/0] [s0/0]."
    report = validate_citations(answer, evidence)
    scorer = TableScorer({(claim(s.text), f"Fact {i}."): 9.0 for i in range(6) for s in report.sentences})
    checked = check_support(report, evidence, scorer, max_checks=4)
    assert [c.support is not None for c in checked.citations] == [True] * 4 + [False] * 4
    assert checked.unchecked == 4
    assert checked.valid  # unchecked citations are not held against the answer


def test_claim_drops_markers_and_collapses_space():
    assert claim("Refunds  take a week [billing/refunds.md/0] [x\\[1\\]/2].") == "Refunds take a week ."


@pytest.fixture(scope="module")
def model():
    from gateway.retrieval.stages.cross_encoder import shared_model

    return shared_model()


def test_the_bundled_model_does_not_support_an_invented_claim_on_the_demo_corpus(model):
    chunk = (ROOT / "tenants/corpora/acme/docs/refunds.md").read_text()[:800]
    evidence = [Evidence("refunds.md", "0", chunk)]
    answer = ("Refunds are always returned to the original payment method [refunds.md/0]. "
              "always paid in cash within one hour [refunds.md/0]")
    checked = check_support(validate_citations(answer, evidence), evidence, model)
    backed, invented = checked.citations
    assert backed.status is invented.status is CitationStatus.VALID
    assert backed.support.verdict is SupportVerdict.SUPPORTED
    assert invented.support.verdict is SupportVerdict.UNSUPPORTED and not checked.valid
