"""Name linking: the names an answer mentions, each with the passages that mention it."""

import pytest

from gateway.errors import LimitExceeded
from gateway.grounding.names import MAX_NAMES, NameCitation, Passage, link_names, names_in

ANSWER = ("Refunds take five days with Acme Vault [vault/0]. The Bank of England and SSO via ACME-SVC-503 error. "
          'Use `gateway sync` or "storage classes". See Single Sign-On. Contact Acme Support today. acme vault again.')
PASSAGES = [Passage("vault", "0", "Acme Vault keeps keys. acme vault rotates them.", "Acme Vault"),
            Passage("sso", "1", "Set up SSO with Okta. Acme Support helps. Acme Vault too.", "SSO setup"),
            Passage("codes", "2", "Error ACME-SVC-503 means the service is down.")]


def test_names_are_capitalised_runs_codes_and_quoted_spans_at_their_offsets():
    names = [(m.name, m.start) for m in names_in(ANSWER)]
    assert [n for n, _ in names] == ["Acme Vault", "Bank of England", "SSO", "ACME-SVC-503", "gateway sync",
                                     "storage classes", "Single Sign-On", "Contact Acme Support"]
    assert all(ANSWER[start:start + len(name)] == name for name, start in names)


def test_a_lone_sentence_initial_word_and_citation_markers_are_not_names():
    assert names_in("Refunds are quick. Invoices too [Billing/0].") == []
    assert [m.name for m in names_in("Refunds are quick. S3 and SSO are not.")] == ["S3", "SSO"]


def test_each_name_links_to_the_passages_that_mention_it_title_first_then_by_mentions():
    links = {link.name: link for link in link_names(ANSWER, PASSAGES)}
    vault = links["Acme Vault"]
    assert vault.citations == (NameCitation("vault", "0", "[vault/0]", True, 2),
                               NameCitation("sso", "1", "[sso/1]", False, 1))
    assert (vault.start, vault.end, vault.mentions) == (28, 38, 2)  # "acme vault again" counts, case-folded
    assert [c.marker for c in links["SSO"].citations] == ["[sso/1]"]
    assert [c.marker for c in links["ACME-SVC-503"].citations] == ["[codes/2]"]
    # Only "Acme Support" is mentioned by a passage: the sentence's first word was not part of the name.
    assert "Contact Acme Support" not in links and [c.marker for c in links["Acme Support"].citations] == ["[sso/1]"]
    # Names no passage mentions are listed, unlinked.
    assert links["Bank of England"].citations == () and links["storage classes"].citations == ()


def test_a_name_matches_whole_words_only_and_per_name_bounds_the_citations():
    passages = [Passage("s", "0", "SSOs and XSSO are other words."), *(Passage(f"p{i}", "0", "SSO") for i in range(7))]
    [sso] = link_names("We use SSO.", passages, per_name=3)
    assert [c.source_id for c in sso.citations] == ["p0", "p1", "p2"]


def test_limits_are_named():
    with pytest.raises(LimitExceeded, match="at most 200 are linked against"):
        link_names("SSO", [Passage("s", str(i), "x") for i in range(201)])
    with pytest.raises(LimitExceeded, match="at most 100000 are linked"):
        names_in("x" * 100_001)
    many = ", ".join(f"Name{i}x" for i in range(MAX_NAMES + 10))
    assert len(names_in(many)) == MAX_NAMES
    assert names_in("We Read The Very Long Title Cased Heading Here.") == []  # more than six words
