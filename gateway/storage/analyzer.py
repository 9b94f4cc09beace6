"""Text analysis for BM25, done in the gateway, in the collection's language.

milvus-lite's analyzer has no stemming (stemmer filters are accepted and silently ignored, even
for a language it has never heard of) and stop words only as a literal list, so text is
analysed here — lowercase, the language's stop words, its Snowball stemmer — and Milvus's
`standard` analyzer only splits the result on spaces. Documents and queries of a collection go
through the same analyzer, so BM25 ranks the same on milvus-lite and on a server.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import lru_cache

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


@lru_cache(maxsize=None)
def analyzer_for(language: Language) -> Analyzer:
    """The one analyzer of a language (its stem cache shared by every collection in that language)."""
    return Analyzer(language)
