"""Text analysis for BM25, done in the gateway, in the collection's language.

milvus-lite's analyzer has no stemming (stemmer filters are accepted and silently ignored, even
for a language it has never heard of) and stop words only as a literal list, so text is
analysed here — lowercase, the language's stop words, its Snowball stemmer — and Milvus's
`standard` analyzer only splits the result on spaces. Documents and queries of a collection go
through the same analyzer, so BM25 ranks the same on milvus-lite and on a server.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

import numpy as np
import Stemmer

from gateway.storage import stopwords

# Letters and digits only: `_` is a word character to Python's \w but a separator to some
# analyzers, so it is excluded to keep tokenisation identical on every engine.
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
# The same tokens of ASCII text, found by bytes.translate and split: every byte but a-z and 0-9 (after
# lower()) becomes a space. Four times faster than the regex; a bulk load analyses every chunk.
_ASCII_SEPARATORS = bytes(c if chr(c).isascii() and chr(c).isalnum() and not chr(c).isupper() else 32
                          for c in range(256))
# Distinct ASCII tokens whose terms an analyser keeps; a corpus has far fewer than it has tokens.
_MAX_CACHED = 500_000
# Between the texts of a batch (`analyse_batch`): a byte no token holds, kept by the batch's table.
_MARK = 1
_BATCH_SEPARATORS = _ASCII_SEPARATORS[:_MARK] + bytes([_MARK]) + _ASCII_SEPARATORS[_MARK + 1:]
# A token's vocabulary index when it is a stop word, or the mark between two texts.
_STOP, _BETWEEN = -1, -2

# Lucene's EnglishAnalyzer stop set plus common function words (as in bm25s "en").
STOP_WORDS: frozenset[str] = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their
    then there these they this to was will with i me my myself we our ours ourselves you your
    yours yourself yourselves he him his himself she her hers herself its itself them theirs
    themselves what which who whom those am were been being have has had having do does did
    doing because until while about against between through during before after above below
    from up down out off over under again further once here when where why how all any both
    each few more most other some own same so than too very s t can just don should now""".split()
)


class Language(StrEnum):
    """A collection's BM25 language (ISO 639-1); `none` lowercases and splits only, for ids and codes."""

    EN = "en"
    DE = "de"
    FR = "fr"
    ES = "es"
    IT = "it"
    NL = "nl"
    PT = "pt"
    SV = "sv"
    RU = "ru"
    NONE = "none"


# Each language's Snowball stemmer (PyStemmer's name) and stop words.
_ANALYSIS: dict[Language, tuple[str | None, frozenset[str]]] = {
    Language.EN: ("english", STOP_WORDS),
    Language.DE: ("german", stopwords.GERMAN),
    Language.FR: ("french", stopwords.FRENCH),
    Language.ES: ("spanish", stopwords.SPANISH),
    Language.IT: ("italian", stopwords.ITALIAN),
    Language.NL: ("dutch", stopwords.DUTCH),
    Language.PT: ("portuguese", stopwords.PORTUGUESE),
    Language.SV: ("swedish", stopwords.SWEDISH),
    Language.RU: ("russian", stopwords.RUSSIAN),
    Language.NONE: (None, frozenset()),
}


@dataclass(frozen=True, slots=True)
class AnalysedTexts:
    """Texts analysed together (`Analyzer.analyse_batch`): `texts[i]` is `analyse` of the i-th text, and
    its terms, in order, are `vocabulary[t]` for the `t` of `terms` whose `rows` entry is i."""

    texts: list[str]
    rows: np.ndarray  # int64, ascending
    terms: np.ndarray  # int64 indices into vocabulary
    vocabulary: list[str]


class Analyzer:
    """Lowercase, drop the language's stop words, Snowball-stem; returns space-joined terms.

    `Analyzer(Language.DE).terms("Die Häuser")` is `["haus"]`; `Language.NONE` keeps every token as
    it is (lowercased): `"ERR-42"` is `["err", "42"]`.
    """

    def __init__(self, language: Language = Language.EN) -> None:
        self.language = Language(language)
        algorithm, self._stop_words = _ANALYSIS[self.language]
        self._stem = (lru_cache(maxsize=200_000)(Stemmer.Stemmer(algorithm).stemWord) if algorithm is not None
                      else str)
        # ASCII token -> its term, "" for a stop word.
        self._ascii: dict[bytes, str] = {}
        # Terms seen by `analyse_batch` (append-only; a new list when the caches are cleared), the index
        # of each, and each ASCII token's term index (_STOP for a stop word).
        self.vocabulary: list[str] = []
        self._term_index: dict[str, int] = {}
        self._token_index: dict[bytes, int] = {bytes([_MARK]): _BETWEEN}

    def terms(self, text: str) -> list[str]:
        if text.isascii():
            tokens = text.encode("ascii").lower().translate(_ASCII_SEPARATORS).split()
            try:
                return [t for t in map(self._ascii.__getitem__, tokens) if t]
            except KeyError:
                return self._cache_terms(tokens)
        return [self._stem(t) for t in _TOKEN.findall(text.lower()) if t not in self._stop_words]

    def _cache_terms(self, tokens: list[bytes]) -> list[str]:
        cache = self._ascii
        if len(cache) > _MAX_CACHED:
            cache.clear()
        found = {token: cache.get(token) for token in set(tokens)}
        for token, term in found.items():
            if term is None:
                word = token.decode("ascii")
                found[token] = cache[token] = "" if word in self._stop_words else self._stem(word)
        return [t for t in map(found.__getitem__, tokens) if t]

    def analyse(self, text: str) -> str:
        return " ".join(self.terms(text))

    def analyse_batch(self, texts: Sequence[str]) -> AnalysedTexts:
        """`analyse` of every text, and their terms as indices into `vocabulary` (for BM25 term
        frequencies, storage/bulk.py). ASCII texts are split all at once, joined by a mark byte, and their
        tokens looked up once: a bulk load analyses every chunk, and did it text by text, then split the
        analysed texts again to count their terms."""
        if len(self._token_index) > _MAX_CACHED or len(self.vocabulary) > _MAX_CACHED:
            self.vocabulary, self._term_index, self._token_index = [], {}, {bytes([_MARK]): _BETWEEN}
        between = f" {chr(_MARK)} "
        joined = between.join(texts)
        if not texts or not joined.isascii() or joined.count(chr(_MARK)) != len(texts) - 1:
            return self._analyse_each(texts)
        tokens = joined.encode("ascii").lower().translate(_BATCH_SEPARATORS).split()
        index = self._token_index
        try:
            ids = np.fromiter(map(index.__getitem__, tokens), np.int64, len(tokens))
        except KeyError:
            for token in set(tokens).difference(index):
                word = token.decode("ascii")
                term = "" if word in self._stop_words else self._stem(word)
                index[token] = self._term_id(term) if term else _STOP
            ids = np.fromiter(map(index.__getitem__, tokens), np.int64, len(tokens))
        marks = ids == _BETWEEN
        kept = ids >= 0
        rows = np.cumsum(marks)[kept]
        # Each text's terms joined by spaces, the texts by newlines (no term holds either): one join, one split.
        words = list(map([*self.vocabulary, "\n"].__getitem__, np.where(marks, -1, ids)[kept | marks].tolist()))
        analysed = [text.strip(" ") for text in " ".join(words).split("\n")]
        return AnalysedTexts(analysed, rows, ids[kept], self.vocabulary)

    def _analyse_each(self, texts: Sequence[str]) -> AnalysedTexts:
        per_text = [self.terms(text) for text in texts]
        terms = np.fromiter((self._term_id(term) for text in per_text for term in text), np.int64)
        rows = np.repeat(np.arange(len(texts), dtype=np.int64), [len(t) for t in per_text])
        return AnalysedTexts([" ".join(t) for t in per_text], rows, terms, self.vocabulary)

    def _term_id(self, term: str) -> int:
        found = self._term_index.get(term)
        if found is None:
            found = self._term_index[term] = len(self.vocabulary)
            self.vocabulary.append(term)
        return found


@lru_cache(maxsize=None)
def analyzer_for(language: Language) -> Analyzer:
    """The one analyzer of a language (its stem cache shared by every collection in that language)."""
    return Analyzer(language)
