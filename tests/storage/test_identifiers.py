"""Source ids: printable, non-blank, at most 512 characters; messages name the problem."""

import re

import pytest

from gateway.errors import InvalidInput
from gateway.storage.identifiers import MAX_SOURCE_ID_CHARS, check_source_id


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
