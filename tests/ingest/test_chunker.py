from gateway.ingest.chunker import chunk_pages, chunk_text
from gateway.tenancy.config import ChunkingConfig

SENTENCES = [f"Sentence number {i} talks about topic {i} in some detail." for i in range(40)]
TEXT = " ".join(SENTENCES[:20]) + "\n\n" + " ".join(SENTENCES[20:])


def test_children_respect_size_and_cover_every_sentence():
    config = ChunkingConfig(child_chars=200, child_overlap=60, parent_chars=600)
    result = chunk_text(TEXT, config)
    assert all(len(c.text) <= 200 for c in result.children)
    joined = " ".join(c.text for c in result.children)
    assert all(s in joined for s in SENTENCES)
    assert [c.chunk_id for c in result.children] == [str(i) for i in range(len(result.children))]


def test_consecutive_children_overlap_by_whole_sentences():
    config = ChunkingConfig(child_chars=200, child_overlap=60, parent_chars=600)
    children = chunk_text(TEXT, config).children
    same_parent = [(a, b) for a, b in zip(children, children[1:]) if a.parent_index == b.parent_index]
    assert same_parent
    for a, b in same_parent:
        last_sentence = a.text.rsplit(". ", 1)[-1]
        assert b.text.startswith(last_sentence)


def test_children_never_cross_parents_and_parents_hold_them():
    config = ChunkingConfig(child_chars=200, child_overlap=0, parent_chars=500)
    result = chunk_text(TEXT, config)
    assert len(result.parents) > 1
    assert all(len(p) <= 500 for p in result.parents)
    for child in result.children:
        assert child.text in result.parents[child.parent_index]


def test_giant_tokens_are_hard_split():
    config = ChunkingConfig(child_chars=100, child_overlap=0, parent_chars=100)
    result = chunk_text("x" * 250 + " tail", config)
    assert [len(c.text) for c in result.children] == [100, 100, 55]
    assert result.children[-1].text.endswith(" tail")


def test_empty_text_has_no_chunks():
    assert chunk_text("  \n\n ", ChunkingConfig()).children == ()


def test_short_document_is_one_chunk_and_one_parent():
    result = chunk_text("Just one line.", ChunkingConfig())
    assert [c.text for c in result.children] == ["Just one line."]
    assert result.parents == ("Just one line.",)


def test_pages_are_cut_on_their_own_and_chunks_know_their_page():
    config = ChunkingConfig(child_chars=200, child_overlap=0, parent_chars=600)
    page_one = " ".join(SENTENCES[:6])
    result = chunk_pages([page_one, "", "Short last page."], config)
    assert [c.chunk_id for c in result.children] == [str(i) for i in range(len(result.children))]
    assert {c.page for c in result.children[:-1]} == {1}
    assert (result.children[-1].page, result.children[-1].text) == (3, "Short last page.")
    # No chunk and no parent joins text of two pages.
    assert result.parents[-1] == "Short last page." and result.children[-1].parent_index == len(result.parents) - 1
