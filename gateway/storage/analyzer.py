"""English text analysis for BM25, done in the gateway.

milvus-lite's analyzer has no stemming (stemmer filters are accepted and silently ignored)
and no stop words, so text is analysed here — lowercase, English stop words, Snowball
stemming — and Milvus's `standard` analyzer only splits the result on spaces. Documents and
queries go through the same function, so BM25 ranks the same on milvus-lite and on a server.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

# Letters and digits only: `_` is a word character to Python's \w but a separator to some
# analyzers, so it is excluded to keep tokenisation identical on every engine.
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

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


class Analyzer:
    """Lowercase, drop English stop words, Snowball-stem; returns space-joined terms."""

    def __init__(self, language: str = "english") -> None:
        self._stemmer = Stemmer.Stemmer(language)
        self._stem = lru_cache(maxsize=200_000)(self._stemmer.stemWord)

    def terms(self, text: str) -> list[str]:
        return [self._stem(t) for t in _TOKEN.findall(text.lower()) if t not in STOP_WORDS]

    def analyse(self, text: str) -> str:
        return " ".join(self.terms(text))
