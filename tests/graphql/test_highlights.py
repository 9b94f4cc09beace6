"""SearchHit.highlights over HTTP: term spans of the returned content, the best sentence of a dense match."""

from gateway.storage.analyzer import Analyzer

MARKED = """
query($input: SearchInput!, $first: Int) {
  search(input: $input, first: $first) {
    hits { content provenance { originalChars }
           highlights { spans { start end text term } sentence { start end text score } truncated } }
  }
}
"""


def _hits(gateway, first=None, **input):
    return gateway.data(MARKED, {"input": input, "first": first})["search"]["hits"]


def test_spans_mark_the_query_terms_in_the_returned_content(gateway):
    hits = _hits(gateway, query="refunded invoices", collection="docs", limit=3)
    terms = set(Analyzer().terms("refunded invoices"))
    marked = [h for h in hits if h["highlights"]["spans"]]
    assert marked
    for hit in marked:
        spans = hit["highlights"]["spans"]
        for span in spans:
            # Offsets index the content as returned; the word's own analysis gives the matched term.
            assert hit["content"][span["start"]:span["end"]] == span["text"]
            assert span["term"] in terms and span["term"] in Analyzer().terms(span["text"])
        assert [s["start"] for s in spans] == sorted(s["start"] for s in spans)
        assert hit["highlights"]["sentence"] is None and hit["highlights"]["truncated"] is False
    assert any(s["text"].lower() != s["term"] for h in marked for s in h["highlights"]["spans"])  # stems


def test_a_dense_match_without_query_words_gets_its_best_sentence(gateway):
    # No word of the query is in the corpus: every hit is a dense match.
    hits = _hits(gateway, query="reimbursement", collection="docs", mode="DENSE", limit=3)
    for hit in hits:
        marks = hit["highlights"]
        assert marks["spans"] == []
        sentence = marks["sentence"]
        assert hit["content"][sentence["start"]:sentence["end"]] == sentence["text"] and sentence["text"]
        assert -1 <= sentence["score"] <= 1
    assert "refund" in hits[0]["highlights"]["sentence"]["text"].lower()


def test_offsets_are_into_the_compressed_content(gateway):
    hits = _hits(gateway, query="rate limits per API key", collection="docs", limit=3, pipeline="evidence")
    cut = [h for h in hits if h["provenance"]["originalChars"]]
    assert cut, "the evidence pipeline's compress stage should cut at least one hit"
    for hit in cut:
        for span in hit["highlights"]["spans"]:
            assert hit["content"][span["start"]:span["end"]] == span["text"]


def test_a_search_by_vector_alone_gets_sentences_only(gateway, embedder):
    vector = embedder.embed_query("how do I get my money back").tolist()
    hits = _hits(gateway, vector=vector, collection="docs", limit=2)
    assert hits and all(h["highlights"]["spans"] == [] and h["highlights"]["sentence"] for h in hits)


def test_a_page_is_highlighted_as_the_same_hits_of_the_whole_list(gateway):
    whole = _hits(gateway, query="webhook signature retries", collection="docs", limit=6)
    first = _hits(gateway, first=2, query="webhook signature retries", collection="docs", limit=6)
    assert [h["highlights"] for h in first] == [h["highlights"] for h in whole[:2]]


def test_context_hits_have_highlights_too(gateway):
    data = gateway.data('{ context(input: {query: "storage classes", collection: "docs", limit: 2}) '
                        '{ hits { content highlights { spans { text term } } } } }')
    assert all(h["highlights"]["spans"] for h in data["context"]["hits"])
