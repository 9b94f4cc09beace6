"""Highlights: term spans by the BM25 analysis, code-point offsets, and the best sentence of a hit without one."""

import re

import numpy as np
import pytest

from gateway.retrieval.highlights import MAX_SENTENCES, MAX_SPANS, highlight, sentence_spans, term_spans
from gateway.storage.analyzer import Analyzer
from tests.retrieval.stages.hits import make_hit

ANALYZER = Analyzer()


def _marked(content: str, query: str) -> list[tuple[str, str]]:
    spans, _ = term_spans(content, frozenset(ANALYZER.terms(query)), ANALYZER)
    return [(content[s.start:s.end], s.term) for s in spans]


def test_stemmed_words_match_and_stop_words_do_not():
    content = "Refunds are refunded to the card. The refunding policy: no REFUND after 14 days."
    assert _marked(content, "the refund policy") == [
        ("Refunds", "refund"), ("refunded", "refund"), ("refunding", "refund"), ("policy", "polici"),
        ("REFUND", "refund")]


def test_offsets_count_code_points_of_the_content():
    content = "🙂 Ünïcode naïve café: the invoice_id is in the Invoice."
    spans, _ = term_spans(content, frozenset(ANALYZER.terms("invoices cafe naive")), ANALYZER)
    found = [(s.start, s.end, content[s.start:s.end]) for s in spans]
    # The emoji is one code point (two UTF-16 units), so "invoice" starts at 26; `_` splits words, as in
    # BM25; an accent is part of a word ("cafe" is not "café").
    assert found == [(26, 33, "invoice"), (47, 54, "Invoice")]
    assert _marked(content, "naïve café") == [("naïve", "naïv"), ("café", "café")]


@pytest.mark.parametrize("text", [
    "Refunds, invoices & the İstanbul office's API_KEY (v2.0) — naïve façade… ÆSIR 123abc",
    "Straße STRASSE ǅemal ﬁle ΣΊΣΥΦΟΣ",
])
def test_words_are_the_analyzers_tokens(text):
    # The spans' own tokenisation yields exactly the terms BM25 indexes for the text.
    words = re.finditer(r"[^\W_]+", text)
    assert [t for w in words for t in ANALYZER.terms(w.group())] == ANALYZER.terms(text)


def test_spans_are_bounded():
    spans, truncated = term_spans("refund " * 150, frozenset({"refund"}), ANALYZER)
    assert len(spans) == MAX_SPANS and truncated
    assert term_spans("nothing here", frozenset(), ANALYZER) == ((), False)


def test_sentences_exclude_surrounding_space():
    text = "  First one.  Second (quoted!\") one?\n\n Third\nline "
    assert [text[a:b] for a, b in sentence_spans(text)] == ["First one.", 'Second (quoted!")', "one?", "Third\nline"]


def test_a_hit_without_a_term_gets_its_most_similar_sentence_in_one_batch():
    calls = []

    def similarity(sentences):
        calls.append(list(sentences))
        return np.array([0.9 if "money back" in s else 0.1 for s in sentences], dtype=np.float32)

    marked = make_hit("a", 0.9, "We refund within 14 days.")
    dense = make_hit("b", 0.8, "Plans renew monthly. You get your money back if you cancel early. Ask support.")
    long = make_hit("c", 0.7, " ".join(f"Sentence {i}." for i in range(20)))
    image = make_hit("d", 0.6, "A photo of a receipt.")
    image = type(image)(**{**{f: getattr(image, f) for f in image.__dataclass_fields__}, "modality": "image"})
    out = highlight([marked, dense, long, image], "refunds", lambda hit: ANALYZER, similarity)
    assert [len(h.spans) for h in out] == [1, 0, 0, 0] and out[0].sentence is None
    sentence = out[1].sentence
    assert dense.content[sentence.start:sentence.end] == "You get your money back if you cancel early."
    assert sentence.score == pytest.approx(0.9)
    assert out[2].sentence.start == 0  # equal scores: the earlier sentence
    assert out[3].sentence is None  # an image has no sentences to compare
    assert len(calls) == 1 and len(calls[0]) == 3 + MAX_SENTENCES  # one batch, at most 8 sentences a hit
    assert highlight([dense], "refunds", lambda hit: ANALYZER, None)[0].sentence is None  # no embedder: no sentence


def test_the_bundled_embedder_picks_the_paraphrase(embedder):
    hit = make_hit("a", 0.5, "Our offices are in Berlin. Customers who cancel within two weeks get their money "
                             "returned. The logo is blue.")
    query = "reimbursement policy"
    vector = embedder.embed_query(query)
    (found,) = highlight([hit], query, lambda hit: ANALYZER, lambda sentences: embedder.embed_documents(sentences) @ vector)
    assert found.spans == ()
    assert hit.content[found.sentence.start:found.sentence.end].startswith("Customers who cancel")


def test_each_hit_is_read_with_its_collections_analysis():
    class Exact(Analyzer):
        """No stems and no stop words: a collection of ids and codes."""

        def terms(self, text):
            return [t.lower() for t in re.findall(r"[^\W_]+", text)]

    exact = Exact()
    docs, codes = make_hit("a", 0.9, "Refunds are refunded.", collection="docs"), make_hit(
        "b", 0.8, "refunds REFUNDED", collection="codes")
    out = highlight([docs, codes], "refunded", lambda hit: exact if hit.collection == "codes" else ANALYZER, None)
    assert [[(s.start, s.end, s.term) for s in h.spans] for h in out] == [
        [(0, 7, "refund"), (12, 20, "refund")], [(8, 16, "refunded")]]
