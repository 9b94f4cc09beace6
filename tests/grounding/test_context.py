"""The context block: header, markers with collection, distinguishable scores, budgets, no empty block."""

import pytest

from gateway.errors import InvalidInput, NoEvidence
from gateway.grounding.citations import Evidence, validate_citations
from gateway.grounding.context import MIN_CHARS, MIN_TOKENS, render_context
from gateway.retrieval.hit import Hit, Provenance


def hit(source: str, score: float, content: str, collection: str = "docs") -> Hit:
    provenance = Provenance(tenant="acme", namespace="support", collection=collection, trust_tier="first-party",
                            retriever="hybrid", mode="hybrid")
    return Hit(namespace="support", collection=collection, source_id=source, chunk_id="0", content=content,
               score=score, provenance=provenance)


HITS = [hit("refunds.md", 0.032787, "Refunds go back to the card\nwithin five days."),
        hit("T-1", 0.032258, "Customer asked about a refund.", collection="tickets")]


def test_header_markers_collections_ranks_and_scores_that_differ():
    text = render_context("How do  refunds work?", HITS).text
    assert text.splitlines() == [
        "## Retrieved Context (How do refunds work?)",
        "- [refunds.md/0] (support/docs · rank 1 · score 0.0328) Refunds go back to the card within five days.",
        "- [T-1/0] (support/tickets · rank 2 · score 0.0323) Customer asked about a refund.",
    ]


def test_a_budget_bounds_the_whole_block_cuts_at_a_word_and_never_a_marker():
    many = HITS * 6
    full = render_context("How do refunds work?", many).text
    for budget in range(len(full) + 1, MIN_CHARS - 1, -7):
        block = render_context("How do refunds work?", many, max_chars=budget)
        assert len(block.text) <= budget  # header and note included
        lines = block.text.splitlines()
        for line in lines[1:]:
            assert line.startswith("- [") and "] (support/" in line or line.endswith("left out by the budget)")
        shown = [line for line in lines[1:] if line.startswith("- [")]
        assert len(shown) + block.left_out == len(many)
        assert (f"({block.left_out} more hits left out by the budget)" in block.text) == (block.left_out > 0)
        assert block.shortened == sum(line.endswith("…") for line in shown)
    cut = render_context("q", HITS, max_chars=120)
    assert len(cut.text) <= 120 and cut.left_out == 1 and "(1 more hits left out by the budget)" in cut.text


def test_the_smallest_budget_still_says_what_it_left_out():
    block = render_context("a very long question " * 10, HITS, max_chars=MIN_CHARS)
    assert len(block.text) <= MIN_CHARS and block.left_out == 2
    header, note = block.text.splitlines()
    assert header.startswith("## Retrieved Context (a") and header.endswith("…)")
    assert note == "(2 more hits left out by the budget)"


def test_token_budget_uses_four_characters_a_token():
    assert render_context("q", HITS, max_tokens=30) == render_context("q", HITS, max_chars=120)
    assert render_context("q", HITS, max_tokens=1000) == render_context("q", HITS)  # fits whole: no note


def test_nothing_to_render_is_an_error_with_the_reason():
    with pytest.raises(NoEvidence, match=r"no evidence was found for 'banana bread' \(abstained: too low\)"):
        render_context("banana  bread", [], reasons=["abstained: too low"])


def test_budgets_too_small_to_say_what_was_left_out_are_refused():
    with pytest.raises(InvalidInput, match=f"maxChars is 1; it must be at least {MIN_CHARS} "):
        render_context("q", HITS, max_chars=1)
    with pytest.raises(InvalidInput, match=f"maxTokens is 0; it must be at least {MIN_TOKENS} "):
        render_context("q", HITS, max_tokens=0)


def test_markers_with_brackets_round_trip_through_validate_citations():
    text = render_context("faq", [hit("faq[v2].md", 0.5, "Answers.")]).text
    assert "- [faq\\[v2\\].md/0] (support/docs" in text
    marker = text.splitlines()[1].split(" (")[0][2:]
    report = validate_citations(f"Answers {marker}.", [Evidence("faq[v2].md", "0", "Answers.")])
    assert report.valid and report.citations[0].source_id == "faq[v2].md"
