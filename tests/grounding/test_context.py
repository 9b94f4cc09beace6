"""The context block: header, markers with collection, distinguishable scores, budgets, no empty block."""

import pytest

from gateway.errors import InvalidInput, NoEvidence
from gateway.grounding.context import render_context
from gateway.retrieval.hit import Hit, Provenance


def hit(source: str, score: float, content: str, collection: str = "docs") -> Hit:
    provenance = Provenance(tenant="acme", namespace="support", collection=collection, trust_tier="first-party",
                            retriever="hybrid", mode="hybrid")
    return Hit(namespace="support", collection=collection, source_id=source, chunk_id="0", content=content,
               score=score, provenance=provenance)


HITS = [hit("refunds.md", 0.032787, "Refunds go back to the card\nwithin five days."),
        hit("T-1", 0.032258, "Customer asked about a refund.", collection="tickets")]


def test_header_markers_collections_ranks_and_scores_that_differ():
    text = render_context("How do  refunds work?", HITS)
    assert text.splitlines() == [
        "## Retrieved Context (How do refunds work?)",
        "- [refunds.md/0] (support/docs · rank 1 · score 0.0328) Refunds go back to the card within five days.",
        "- [T-1/0] (support/tickets · rank 2 · score 0.0323) Customer asked about a refund.",
    ]


def test_a_budget_cuts_content_at_a_word_and_never_a_marker():
    full = render_context("q", HITS)
    for budget in range(len(full), 20, -7):
        text = render_context("q", HITS, max_chars=budget)
        lines = text.splitlines()
        for line in lines[1:]:
            assert line.startswith("- [") and "] (support/" in line or line.endswith("left out by the budget)")
        body = [line for line in lines[1:] if line.startswith("- [")]
        assert len("\n".join([lines[0], *body])) <= budget
    cut = render_context("q", HITS, max_chars=120)
    assert "…" in cut and "(1 more hits left out by the budget)" in cut


def test_token_budget_uses_four_characters_a_token():
    assert render_context("q", HITS, max_tokens=30) == render_context("q", HITS, max_chars=120)


def test_nothing_to_render_is_an_error_with_the_reason():
    with pytest.raises(NoEvidence, match=r"no evidence was found for 'banana bread' \(abstained: too low\)"):
        render_context("banana  bread", [], reasons=["abstained: too low"])


def test_budgets_below_one_are_refused():
    with pytest.raises(InvalidInput, match="maxChars is 0; it must be at least 1"):
        render_context("q", HITS, max_chars=0)
