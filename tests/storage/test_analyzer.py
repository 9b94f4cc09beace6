"""BM25 analysis per language: stop words, Snowball stems, and `none` for ids and codes."""

import pytest

from gateway.storage import stopwords
from gateway.storage.analyzer import STOP_WORDS, Analyzer, Language, analyzer_for


def test_english_is_the_default_and_stems_and_drops_stop_words():
    assert Analyzer().language is Language.EN
    assert Analyzer().terms("The runners were running to the houses") == ["runner", "run", "hous"]
    assert Analyzer().analyse("Refunded payments") == "refund payment"


@pytest.mark.parametrize(("language", "text", "terms"), [
    (Language.DE, "Die Häuser der Städte und ein Haus", ["haus", "stadt", "haus"]),
    (Language.FR, "L'homme qu'il aimait et les hommes", ["homm", "aim", "homm"]),
    (Language.ES, "Las casas de los niños y la casa", ["cas", "niñ", "cas"]),
    (Language.IT, "Le case dei bambini e la casa", ["cas", "bambin", "cas"]),
    (Language.NL, "De huizen van de kinderen en het huis", ["huis", "kinder", "huis"]),
    (Language.PT, "As casas dos meninos e a casa", ["cas", "menin", "cas"]),
    (Language.SV, "Husen och barnen i huset", ["hus", "barn", "hus"]),
    (Language.RU, "Книги и книга в школе", ["книг", "книг", "школ"]),
])
def test_each_language_drops_its_stop_words_and_stems_its_words(language, text, terms):
    assert Analyzer(language).terms(text) == terms
    # English analysis of the same text keeps the other language's function words and its inflections.
    assert Analyzer(Language.EN).terms(text) != terms


def test_none_lowercases_and_splits_only():
    assert Analyzer(Language.NONE).terms("ERR-42 the Running_dogs ÄÖ") == ["err", "42", "the", "running", "dogs", "äö"]


def test_languages_are_the_snowball_set_by_iso_code():
    assert [lang.value for lang in Language] == ["en", "de", "fr", "es", "it", "nl", "pt", "sv", "ru", "none"]
    assert Analyzer("de").language is Language.DE  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'german' is not a valid Language"):
        Analyzer("german")  # type: ignore[arg-type]


def test_stop_word_lists_are_lowercase_and_each_languages_own():
    lists = {"de": stopwords.GERMAN, "fr": stopwords.FRENCH, "es": stopwords.SPANISH, "it": stopwords.ITALIAN,
             "nl": stopwords.DUTCH, "pt": stopwords.PORTUGUESE, "sv": stopwords.SWEDISH, "ru": stopwords.RUSSIAN}
    for code, words in lists.items():
        assert words and all(w == w.lower() for w in words), code
        assert all(not Analyzer(Language(code)).terms(w) for w in words), code
    assert {"und", "der", "die"} <= stopwords.GERMAN and {"и", "в", "не"} <= stopwords.RUSSIAN
    assert "the" in STOP_WORDS and "the" not in stopwords.GERMAN


def test_one_analyzer_per_language_is_shared():
    assert analyzer_for(Language.DE) is analyzer_for(Language.DE)
    assert analyzer_for(Language.DE).language is Language.DE and analyzer_for(Language.EN).language is Language.EN


@pytest.mark.parametrize("language", [Language.EN, Language.DE, Language.NONE])
def test_ascii_text_gives_the_terms_of_the_unicode_tokeniser(language):
    import re
    import string

    import numpy as np

    analyzer = Analyzer(language)
    reference = Analyzer(language)
    rng = np.random.default_rng(11)
    alphabet = list(string.printable) + ["The ", "refunds ", "ERR-42 ", "snake_case ", "\t", "\x00", "\x7f"]
    texts = ["".join(rng.choice(alphabet, size=n)) for n in rng.integers(0, 120, size=300)]
    texts += ["", "   ", "Häuser and ASCII", "the THE The", "a_b c-d e.f 3.14 x2y"]
    for text in texts * 2:  # the second pass reads the cache
        expected = [reference._stem(t) for t in re.findall(r"[^\W_]+", text.lower())
                    if t not in reference._stop_words]
        assert analyzer.terms(text) == expected, text


BATCHES = [
    ["The runners were running to the houses", "Refunded payments, 42 of them!", "", "   ", "ERR-42 snake_case",
     "the and of", "UPPER lower MiXeD", "tabs\tand\nnewlines\r\nhere", "a" * 70, "x"],
    ["Die Häuser der Städte", "naïve café", "plain ascii after unicode"],  # not all ASCII: text by text
    ["mark \x01 inside", "a text"],  # the batch's own mark in a text: text by text
    [""],
    ["only"],
]


@pytest.mark.parametrize("language", [Language.EN, Language.DE, Language.NONE])
@pytest.mark.parametrize("texts", BATCHES)
def test_a_batch_analyses_each_text_as_analyse_does_and_lists_its_terms(language, texts):
    analyzer = Analyzer(language)
    for _ in range(2):  # the second time every token is known
        batch = analyzer.analyse_batch(texts)
        assert batch.texts == [Analyzer(language).analyse(t) for t in texts]
        assert list(batch.rows) == sorted(batch.rows)
        terms = [[batch.vocabulary[t] for t, row in zip(batch.terms, batch.rows) if row == i] for i in range(len(texts))]
        assert terms == [text.split() for text in batch.texts]
    assert analyzer.analyse_batch([]).texts == []
