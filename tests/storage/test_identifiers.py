"""Source ids: printable, non-blank, at most 512 characters; messages name the problem."""

import re

import pytest

from gateway.errors import InvalidInput
from gateway.storage.identifiers import MAX_SOURCE_ID_CHARS, check_source_id, relative_source_path


@pytest.mark.parametrize("value", ["refunds.md", 'zz"', '~" or id != "', "ünï/cödé", "a b", "x" * 512])
def test_printable_ids_pass_unchanged(value):
    assert check_source_id(value) == value


@pytest.mark.parametrize("value, codepoint", [
    ("a\x00b", "U+0000"), ("a\nb", "U+000A"), ("a\tb", "U+0009"), ("a\x7fb", "U+007F"), ("a\x1bb", "U+001B"),
    ("a\u200bb", "U+200B"), ("a\u2028b", "U+2028"), ("a\ud800b", "U+D800"), ("a\x85b", "U+0085"),
])
def test_non_printable_characters_are_named(value, codepoint):
    with pytest.raises(InvalidInput, match=re.escape(f"non-printable character {codepoint}; allowed: printable")):
        check_source_id(value)


@pytest.mark.parametrize("value", ["", "   "])
def test_blank_ids_are_refused(value):
    with pytest.raises(InvalidInput, match="sourceId is empty; send 1 to 512 printable characters"):
        check_source_id(value)


def test_length_cap_is_exact():
    assert MAX_SOURCE_ID_CHARS == 512
    with pytest.raises(InvalidInput, match="is 513 characters; at most 512 are allowed"):
        check_source_id("x" * 513)


def test_messages_never_carry_unencodable_text():
    with pytest.raises(InvalidInput) as caught:
        check_source_id("bad\ud800" + "y" * 600)
    caught.value.message.encode("utf-8")


@pytest.mark.parametrize("stored, source_id, shown", [
    ("/srv/corpora/acme/docs/guides/setup.md", "guides/setup.md", "guides/setup.md"),  # a row from before
    ("/srv/corpora/acme/docs/setup.md", "other-id", "setup.md"),
    ("C:\\corpora\\docs\\setup.md", "setup.md", "setup.md"),
    ("guides/setup.md", "guides/setup.md", "guides/setup.md"),
    ("", "x", ""),
])
def test_a_reader_never_sees_an_absolute_server_path(stored, source_id, shown):
    assert relative_source_path(stored, source_id) == shown


def test_rows_stored_with_an_absolute_path_are_read_back_relative(lite_store, embedder):
    from gateway.ingest.loaders import Document
    from gateway.ingest.sync import ingest_documents
    from tests.conftest import make_ref

    ref = make_ref("paths", collection="old")
    lite_store.drop(ref.scope)
    # As ingest wrote them before: the resolved absolute path of the file.
    ingest_documents(lite_store, embedder, ref, [Document("guides/setup.md", "Install it with pip.",
                                                          source_path="/srv/secret/docs/guides/setup.md")],
                     progress=False)
    [chunk] = lite_store.source_chunks(ref.scope, "guides/setup.md")
    assert chunk.source_path == "guides/setup.md"
