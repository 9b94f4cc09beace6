"""Citation validation against hand-made evidence: every status, quotes, runs, required sentences."""

import time

import pytest

from gateway.errors import LimitExceeded
from gateway.grounding.citations import (
    MAX_ANSWER_CHARS,
    CitationStatus,
    Evidence,
    format_marker,
    normalise,
    parse_marker,
    split_sentences,
    validate_citations,
)

EVIDENCE = [
    Evidence("billing/refunds.md", "0", "Refunds go back to the original card within five business days. "
                                        "Store credit is instant."),
    Evidence("T-1", "2", "The upload failed with error ACME-SVC-503 — retry after a minute."),
]


def statuses(answer, **kwargs):
    report = validate_citations(answer, EVIDENCE, **kwargs)
    return [(c.source_id, c.chunk_id, c.status) for c in report.citations], report


def test_known_markers_are_valid_and_source_ids_may_hold_slashes():
    found, report = statuses("Refunds take a week [billing/refunds.md/0].")
    assert found == [("billing/refunds.md", "0", CitationStatus.VALID)]
    assert report.valid


def test_unknown_markers_name_the_missing_chunk():
    found, report = statuses("Refunds take a week [billing/refunds.md/1]. Also [other/0].")
    assert [f[2] for f in found] == [CitationStatus.UNKNOWN, CitationStatus.UNKNOWN]
    assert not report.valid


@pytest.mark.parametrize("quote", ['"five business days"', "“Five  business\ndays”", '"FIVE business days"',
                                   "«five business days»"])
def test_quotes_compare_after_unicode_case_and_whitespace_normalisation(quote):
    found, _ = statuses(f"Refunds take {quote} [billing/refunds.md/0].")
    assert found[0][2] is CitationStatus.VALID, quote


def test_a_quote_not_in_the_cited_chunk_is_misquoted():
    found, report = statuses('Store credit is "instant and free" [billing/refunds.md/0].')
    assert found == [("billing/refunds.md", "0", CitationStatus.MISQUOTED)]
    assert report.citations[0].quote == "instant and free"


def test_typographic_dashes_match_plain_ones():
    found, _ = statuses('It said "ACME-SVC-503 - retry after a minute" [T-1/2].')
    assert found[0][2] is CitationStatus.VALID


def test_a_quote_before_a_run_needs_to_be_in_one_of_its_chunks():
    found, _ = statuses('It "failed with error ACME-SVC-503" [billing/refunds.md/0][T-1/2].')
    assert [f[2] for f in found] == [CitationStatus.VALID, CitationStatus.VALID]
    found, _ = statuses('It "never happened" [billing/refunds.md/0] [T-1/2].')
    assert [f[2] for f in found] == [CitationStatus.MISQUOTED, CitationStatus.MISQUOTED]
    found, _ = statuses('It "never happened" [nope/0].')
    assert found[0][2] is CitationStatus.UNKNOWN


def test_required_lists_sentences_without_citations_but_not_headings():
    answer = "# Refunds\nRefunds take a week [billing/refunds.md/0]. Credit is instant. Thanks!\n- ok"
    _, report = statuses(answer, required=True)
    assert [(s.index, s.text) for s in report.uncited] == [(2, "Credit is instant."), (3, "Thanks!")]
    assert not report.valid
    _, lenient = statuses(answer)
    assert lenient.uncited == () and lenient.valid


def test_markers_after_the_full_stop_belong_to_the_sentence():
    assert [s.text for s in split_sentences("Refunds take a week. [billing/refunds.md/0]\nNext one.")] == [
        "Refunds take a week. [billing/refunds.md/0]", "Next one."]


def test_brackets_that_are_not_markers_are_ignored():
    found, _ = statuses("See [1] and [a] and [/x] and [x/] for details [T-1/2].")
    assert found == [("T-1", "2", CitationStatus.VALID)]


def test_limits_and_linear_time_on_hostile_answers():
    with pytest.raises(LimitExceeded, match=f"at most {MAX_ANSWER_CHARS}"):
        validate_citations("x" * (MAX_ANSWER_CHARS + 1), EVIDENCE)
    with pytest.raises(LimitExceeded, match="201 evidence items; at most 200"):
        validate_citations("x", [EVIDENCE[0]] * 201)
    # Unclosed brackets and slashes everywhere: still answered (no backtracking blow-up).
    validate_citations("[" + "a/" * 40_000, EVIDENCE, required=True)
    # Thousands of quoted spans and sentence ends: each stop is checked against one span, not all.
    started = time.perf_counter()
    report = validate_citations('"a. b" c. ' * 9_000, EVIDENCE, required=True)
    assert len(report.uncited) == 9_000 and time.perf_counter() - started < 2.0


def test_normalise():
    assert normalise("  Ｆｉｖｅ\u00a0“days” — ok ") == 'five "days" - ok'


def test_a_quote_holding_several_sentences_is_checked_literally():
    found, report = statuses('"Refunds are instant. No questions asked" [billing/refunds.md/0].')
    assert found == [("billing/refunds.md", "0", CitationStatus.MISQUOTED)]
    assert report.citations[0].quote == "Refunds are instant. No questions asked"
    found, _ = statuses('It said: "Refunds go back to the original card within five business days! Store credit '
                        'is instant." [billing/refunds.md/0] Next? "Retry after a minute" [T-1/2].')
    assert [f[2] for f in found] == [CitationStatus.VALID, CitationStatus.VALID]
    # A stop right before the closing mark still ends the sentence.
    assert [s.text for s in split_sentences('He said "Stop." Then he left. "Why? Go." Fine')] == [
        'He said "Stop."', "Then he left.", '"Why? Go."', "Fine"]


@pytest.mark.parametrize("source_id", ["faq[v2].md", "a]b", "[x]", "dir\\name/file.md", "ends\\", "x\\[y"])
def test_markers_escape_brackets_and_backslashes_both_ways(source_id):
    marker = format_marker(source_id, "3")
    assert parse_marker(marker) == (source_id, "3")
    report = validate_citations(f"It is so {marker}.", [Evidence(source_id, "3", "It is so.")])
    assert [(c.source_id, c.chunk_id, c.status) for c in report.citations] == [(source_id, "3", CitationStatus.VALID)]
    assert report.citations[0].marker == marker


def test_a_backslash_before_any_other_character_is_itself():
    assert parse_marker("[docs\\a.md/0]") == ("docs\\a.md", "0")
    assert parse_marker("[faq\\[v2\\].md/0]") == ("faq[v2].md", "0")
    assert parse_marker("[no-slash]") is None and parse_marker("[a/0] tail") is None
