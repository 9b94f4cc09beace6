"""Name linking: the names an answer mentions, each with the sources that mention it (citation keys).

A pure function over the answer's text and passages (the evidence, or the hits a search of the
tenant's sources found for each name); deterministic, no model. Names are found in the answer as:

- runs of capitalised words (`Acme Vault`, `Single Sign-On`), with `of`, `de`, `von`, ... between
  them (`Bank of England`); leading function words (`The`, `In`, `See`, ...) and trailing
  connectors are left off, and a run of more than six words is a heading, not a name;
- all-capital words and codes with digits (`SSO`, `ACME-SVC-503`, `S3`);
- spans in backticks (`` `gateway sync` ``) and double quotes (`"storage classes"`).

The first word of a sentence is capitalised whatever it is: a run that starts a sentence is
linked without its first word when only that shorter run is mentioned by a passage (`Contact Acme
Support` -> `Acme Support`), else as written; a lone sentence-initial word is not a name
(`Refunds take ...`) unless it is all capitals or has a digit. Citation markers (`[source/0]`) are skipped.

A passage mentions a name when the name occurs in its title or content as whole words, compared
after Unicode (NFKC) and case folding with whitespace collapsed (grounding.citations.normalise).
Each name lists at most `per_name` citations: passages whose title mentions it first, then by how
often the content does, then in the order given. Names no passage mentions are listed too, with
no citations, so a UI can tell a name it could not link from one it did not see.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import LimitExceeded
from gateway.grounding.citations import BRACKETED, MAX_ANSWER_CHARS, format_marker, normalise

# Names one answer links; beyond this an answer is a list, not prose, and the rest are left out.
MAX_NAMES = 50
MAX_PASSAGES = 200
PER_NAME = 5
# A longer run of capitalised words is a title-cased heading or shouting, not a name.
MAX_NAME_WORDS = 6

_CONNECTORS = frozenset({"of", "de", "del", "der", "van", "von", "la", "le", "du"})
# Capitalised at a sentence's start but never a name's first word.
_LEADING = frozenset("""the a an in on at to by for from with and or but if when while this that these those
    our your its their his her my we you it see use then also so as after before because since""".split())
# A word: letters, digits and inner hyphens, dots or apostrophes (Sign-On, O'Neil, v2.1).
_WORD = r"[^\W_](?:[\w'’.-]*[^\W_])?"
_CANDIDATE = re.compile(rf"`([^`\n]{{2,120}})`|\"([^\"\n]{{2,120}})\"|“([^”\n]{{2,120}})”|({_WORD}(?:[ \t]+{_WORD})*)")
_SENTENCE_END = re.compile(r"[.!?][\"'”»)]*\s+$|\n\s*$|^\s*$")


@dataclass(frozen=True, slots=True)
class Passage:
    """A text the answer may have drawn on: a chunk with its citation ids and its source's title."""

    source_id: str
    chunk_id: str
    content: str
    title: str = ""


@dataclass(frozen=True, slots=True)
class NameCitation:
    source_id: str
    chunk_id: str
    marker: str          # the citation key as the answer would write it: [sourceId/chunkId]
    in_title: bool       # the passage's title mentions the name
    mentions: int        # how often its content does


@dataclass(frozen=True, slots=True)
class NameLink:
    """A name the answer mentions: as first written, where (code points), how often, and who mentions it."""

    name: str
    start: int
    end: int
    mentions: int
    citations: tuple[NameCitation, ...]


@dataclass(frozen=True, slots=True)
class Mention:
    """A name's first mention; `shorter` is the same run without a sentence-initial first word."""

    name: str
    start: int
    shorter: Mention | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.name)


def names_in(answer: str) -> list[Mention]:
    """Each name's first mention, in order of first mention, at most MAX_NAMES."""
    if len(answer) > MAX_ANSWER_CHARS:
        raise LimitExceeded(f"answer is {len(answer)} characters; at most {MAX_ANSWER_CHARS} are linked")
    # Markers are blanked (same length), so offsets stay those of the answer.
    text = BRACKETED.sub(lambda m: " " * len(m.group(0)), answer)
    found: dict[str, Mention] = {}
    for match in _CANDIDATE.finditer(text):
        quoted = next((g for g in match.groups()[:3] if g is not None), None)
        if quoted is not None:
            start = match.start() + 1
            mentions = [Mention(quoted.strip(), start + len(quoted) - len(quoted.lstrip()))]
        else:
            mentions = _capitalised(match.group(4), match.start(), text)
        for mention in mentions:
            key = normalise(mention.name)
            if key and key not in found and len(found) < MAX_NAMES:
                found[key] = mention
    return sorted(found.values(), key=lambda mention: mention.start)


def _capitalised(run: str, offset: int, text: str) -> list[Mention]:
    """The names in a run of words: maximal runs of name words, joined by connectors between them."""
    words = [(m.group(0), offset + m.start()) for m in re.finditer(_WORD, run)]
    out: list[Mention] = []
    current: list[tuple[str, int]] = []

    def span(words: list[tuple[str, int]]) -> Mention:
        start = words[0][1]
        return Mention(text[start:words[-1][1] + len(words[-1][0])], start)

    def close() -> None:
        at_start = bool(current) and _sentence_start(text, current[0][1])
        while current and current[-1][0].casefold() in _CONNECTORS:
            current.pop()
        while current and current[0][0].casefold() in _LEADING | _CONNECTORS:
            current.pop(0)
            at_start = False  # after `The` or `See`, a capital is the name's own
        if len(current) > MAX_NAME_WORDS:
            current.clear()
            return
        if current and at_start and not _code_like(current[0][0]):
            rest = current[1:]
            while rest and rest[0][0].casefold() in _CONNECTORS:
                rest.pop(0)
            if rest:
                out.append(Mention(span(current).name, current[0][1], span(rest)))
        elif current:
            out.append(span(current))
        current.clear()

    for word, start in words:
        if _name_word(word):
            current.append((word, start))
        elif current and word.casefold() in _CONNECTORS:
            current.append((word, start))
        else:
            close()
    close()
    return out


def _name_word(word: str) -> bool:
    return word[0].isupper() or _code_like(word)


def _code_like(word: str) -> bool:
    """All capitals (two or more letters: SSO) or a code with a digit and a letter (S3, ACME-SVC-503)."""
    letters = [c for c in word if c.isalpha()]
    return (len(letters) >= 2 and all(c.isupper() for c in letters)) or (
        any(c.isdigit() for c in word) and bool(letters))


def _sentence_start(text: str, start: int) -> bool:
    return bool(_SENTENCE_END.search(text[max(0, start - 4):start]))


def link_names(answer: str, passages: Sequence[Passage], *, per_name: int = PER_NAME) -> list[NameLink]:
    """Each name of `answer` with the passages that mention it, in the order the answer first names them."""
    if len(passages) > MAX_PASSAGES:
        raise LimitExceeded(f"{len(passages)} passages; at most {MAX_PASSAGES} are linked against")
    bodies = [(normalise(p.title), normalise(p.content)) for p in passages]
    plain_answer = normalise(BRACKETED.sub(" ", answer))
    links: dict[str, NameLink] = {}
    for mention in names_in(answer):
        citations = _citations(mention.name, passages, bodies, per_name)
        if not citations and mention.shorter is not None:
            shorter = _citations(mention.shorter.name, passages, bodies, per_name)
            if shorter:  # the sentence's first word was not part of the name
                mention, citations = mention.shorter, shorter
        key = normalise(mention.name)
        if key not in links:
            links[key] = NameLink(mention.name, mention.start, mention.end,
                                  max(1, len(_whole(key).findall(plain_answer))), citations)
    return list(links.values())


def _citations(name: str, passages: Sequence[Passage], bodies: Sequence[tuple[str, str]],
               per_name: int) -> tuple[NameCitation, ...]:
    pattern = _whole(normalise(name))
    cited: list[tuple[tuple[int, int, int], NameCitation]] = []
    for order, (passage, (title, content)) in enumerate(zip(passages, bodies)):
        in_title = bool(pattern.search(title))
        mentions = len(pattern.findall(content))
        if in_title or mentions:
            cited.append(((0 if in_title else 1, -mentions, order), NameCitation(
                passage.source_id, passage.chunk_id, format_marker(passage.source_id, passage.chunk_id),
                in_title, mentions)))
    cited.sort(key=lambda pair: pair[0])
    return tuple(c for _, c in cited[:per_name])


def _whole(name: str) -> re.Pattern[str]:
    """`name` as whole words: not inside a longer word on either side."""
    return re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")
