"""Follow-up resolution: does a query lean on the conversation, and what should be searched instead.

Rules (no model): a query is a would-be follow-up when it uses an anaphoric word ("it", "that",
"they", ...) or has at most `short_query_words` content words ("pricing?", "and for EU?"). Its own
words are then searched too, and judged against the resolved query and the previous turn's hits
(`judge_topic`): when the bundled cross-encoder finds the previous turn's first hits answer them
nearly as well as their own first hits do, it is a follow-up ("are they covered in the van?" after a
moving-house question); otherwise, when they find their own hits about as closely as the resolved query finds its own
and those hits are clearly closer to them than the previous turn's, the question names its own
subject: it is a new topic and keeps its own hits ("Is there nightly backup of every volume?" after a
refunds question); when only one of the two holds, the two rankings are fused, leaning on the
resolved one (`Rules.unsure_weight`), or on its own words when the cross-encoder finds its own first hit
answers it far better than the resolved ranking's first hit (`leans_own`). Otherwise
it is a follow-up, searched as the anchor turn's query followed by its own words, where the anchor
is the most recent turn that stood alone (so "tell me more about it", then "who wrote that?" both
lean on the original question). Every other turn (no anaphoric word, more content words) is searched both
ways and judged too, by the cross-encoder's margin alone (`judge_standalone`): "when do the bins get
emptied then?" after a garden-waste sign-up question is a follow-up. A pronoun that refers to an earlier
clause of the same turn ("My son is 14, can he use the gym with me?") and an extraposed "it" ("how much does
it cost to insure ...") are no cue, so such a turn is judged that way too (`Rules.clause_words`,
`Rules.measure_it`). Such a turn that the margin would let stand alone, after a turn that states a situation and
asks nothing ("I'm picking up an electric car on Friday."), is fused instead (`hedged`, `Rules.statement_role`).
Optional checks (`Rules`, off by default): word exceptions
("is there a limit", "one of my payments"), the share of its words in the previous topic
(`new_topic`), and whether the resolved query ranks its own top hit high (`own_topic`). With
`resolve: llm`, the tenant's language model rewrites the query into a standalone one instead.

Pure functions over turns and hits; the service (`gateway/conversations/service.py`) does I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal

import numpy as np

from gateway.conversations.turns import Turn
from gateway.embedding.base import Embedder
from gateway.errors import UpstreamUnavailable
from gateway.retrieval.hit import Hit, SignalScore, passage_text
from gateway.retrieval.llm import ChatClient
from gateway.storage.analyzer import STOP_WORDS, Analyzer

# Words that point back at something said before. "this"/"that" also open standalone questions
# ("what is this error"), which then merely carry the prior topic along: cheap when wrong.
ANAPHORS: frozenset[str] = frozenset(
    "it its itself that this these those they them their theirs he him his she her hers there "
    "one ones former latter same".split())
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Forms of "be" ("s" is the tail of "there's", "it's" once split into words).
_BE = frozenset("is are was were be been s".split())
# Words after which "one" stands for a noun ("the cheapest one", "which one"), even before another word.
_ONE_HEADS = frozenset("the this that which each any another every no".split())
# Pronouns whose antecedent an earlier clause of the same turn can hold (`Rules.clause_words`).
_PRONOUNS = frozenset("it its itself that this these those they them their theirs he him his she her hers".split())
# Verbs after which an extraposed "it" measures the infinitive that follows ("does it cost to", "it takes to").
_MEASURE_VERBS = frozenset("cost costs take takes took".split())
# Where one clause of a question ends and the next begins (a comma in "20,000" does not).
_CLAUSE_END = re.compile(r"[,;]\s")
# Verbs whose subject "it" names nothing: reporting ("it says ...") and weather ("it is snowing").
_EMPTY_IT_VERBS = frozenset("says said shows reads rains snows raining snowing".split())
# Stems the topic overlap is measured on: the same stemmer BM25 uses (storage/analyzer.py).
_STEMS = Analyzer()
# Words that open a question even without a question mark ("how do I reset my password"): a turn opening with
# one asks something (`states_situation`).
_QUESTION_OPENERS = frozenset("how what when where why who whom whose which can could do does did is are was were "
                              "will would should shall may might must have has am any".split())
# A statement of a situation is a sentence: fewer words are a keyword query ("refund policy").
_STATEMENT_WORDS = 4


@dataclass(frozen=True, slots=True)
class Rules:
    """Which uses of an anaphoric word do not point back, and when a follow-up is a new topic.

    The defaults are the rules chosen leave-one-set-out over conversational sets
    (`python benchmarks/conversations_sets.py ...`; docs/conversations.md): the cross-encoder's margin
    overruling the relative topic check below 6.5 (eight sets), an unsure turn's fusion leaning on the resolved
    ranking unless its own first hit answers it 8 logits better than the resolved ranking's first hit (twelve
    sets), a turn without a cue judged by the margin below 1.5 and an unsure turn whose own first hit is a
    previous source answering it poorly searched resolved (fourteen sets), a pronoun after a clause of the same
    turn and an extraposed "it cost/take to" not pointing back (sixteen sets), a turn without a cue after a turn that
    states a situation fused rather than standing alone (twenty sets); the first round's word exceptions,
    word or rank check, the agreement test, stricter new-topic thresholds, weak cues, the union test and the
    fixed cosine off.
    """

    @property
    def relative(self) -> bool:
        """Whether the relative topic check (`judge_topic`) runs."""
        return self.relative_clarity > 0 or self.previous_margin > 0 or self.relevance

    @property
    def relevance(self) -> bool:
        """Whether the cross-encoder's tests (`relevance_margin`, `relevance_closeness`) run."""
        return self.relevance_margin is not None or self.relevance_closeness is not None or self.union

    @property
    def standalone(self) -> bool:
        """Whether turns without a cue are judged (`standalone_margin`, read from the cross-encoder)."""
        return self.standalone_margin is not None and self.relevance

    @property
    def union(self) -> bool:
        """Whether the union test (`union_low`, `union_high`) runs."""
        return self.union_low is not None or self.union_high is not None

    @property
    def cosines(self) -> bool:
        """Whether the embedder's cosine tests (`relative_clarity`, `previous_margin`) run."""
        return self.relative_clarity > 0 or self.previous_margin > 0

    existential_there: bool = False  # "is there a limit", "there are three": no place meant
    numeral_one: bool = False        # "one of my payments", "one bucket": a number
    empty_it: bool = False           # "is it possible to", "it says", "it is snowing": no referent
    # Only the extraposition of `empty_it`: "is it possible to pay ...", "it is safe to ...", where the
    # infinitive names what "it" stands for. False: off.
    extraposed_it: bool = False
    determiner: bool = False         # "those keys", "that error": the noun names what is meant
    # A pronoun with at least this many content words before it refers inside the question ("how
    # do I restore a file after I deleted it?"). 0: off.
    antecedent_words: int = 0
    # A pronoun in a clause that follows (after a comma or semicolon) a clause of the same turn with at
    # least this many content words refers inside the turn: "My son is 14, can he use the gym with me?",
    # "What about sending alcohol to a friend in Oslo, is that allowed?". Such a turn has no cue and is
    # judged as a turn without one (`standalone_margin`). 0: off. Shipped: 2 (1 and 2 tie), chosen
    # leave-one-set-out over sixteen conversational sets (docs/conversations.md).
    clause_words: int = 2
    # "it" extraposed before a measure verb and "to": "how much does it cost to insure ...", "how long does
    # it take to ..."; the infinitive names what is measured. False: off. Shipped with `clause_words`.
    measure_it: bool = True
    # A short follow-up without an anaphoric word is also searched by its own words, and the two
    # rankings fused (it may open a new topic: "and webhooks?").
    short_alongside: bool = False
    # A would-be follow-up is a new topic when less than this share of its content words occur in
    # the previous topic (the anchor's query and the text of the previous turn's top `topic_sources`
    # sources): "what about webhooks?" after a refunds question. 0: off.
    min_overlap: float = 0.0
    # An anaphoric query is judged so only with at least this many content words: "how are they
    # signed?" names too little to tell. 0: anaphoric queries are always follow-ups.
    shift_words: int = 0
    # How many of the previous turn's top sources make up the previous topic (with the anchor's query).
    topic_sources: int = 1
    # A follow-up is also searched by its own words. When their top hit comes from a source outside
    # the previous turn's boosted sources and the resolved query ranks that source within its first
    # `agree_chunks` hits too, the turn names a subject of its own, strong enough to lead even the
    # glued query: it is a new topic and keeps its own hits (`own_topic`). 0: off (one search).
    agree_chunks: int = 0
    # Whether a short follow-up (no anaphoric word; already compared with the previous topic's words)
    # is checked so too, or only anaphoric ones: one or two words say little about their own topic.
    check_short: bool = False
    # A would-be follow-up (anaphoric or short) is also searched by its own words; when the best dense
    # cosine among those hits reaches this, its words name a subject of their own and it is a new topic
    # that keeps its own hits (`clear_topic`). all-MiniLM-L6-v2 cosines on the graded set: vague
    # follow-ups ("who can request one?") at most 0.32, topic shifts at least 0.34. 0: off. Hits found
    # without a dense signal (mode: sparse) have their first few passages embedded to judge it
    # (`embedded_clarity`). Off in the shipped rules: a fixed cosine does not carry over corpora (the
    # relative check below replaced it).
    clear_cosine: float = 0.0
    # The relative topic check (`judge_topic`), on a would-be follow-up searched both resolved and by its
    # own words. Its own words name a subject of their own when (1) they find their first hits at least
    # `relative_clarity` times as closely as the resolved query finds its own (a vague follow-up's words
    # find theirs at about a third to a half of it), and (2) their own hits are closer to them, by at
    # least `previous_margin` in cosine, than the previous turn's first hits are (a follow-up is about
    # what was found before). Both: a new topic that keeps its own hits; one: unsure, the resolved and own
    # rankings are fused (RRF); neither: a follow-up. Ratio and difference of cosines of the same embedder,
    # so that the check carries over corpora where every question finds closer or looser matches. Chosen
    # leave-one-set-out over four conversational sets (docs/conversations.md). 0: that test is off (never
    # passes); both 0: no relative check.
    relative_clarity: float = 0.5
    previous_margin: float = 0.165
    # A new topic only when both tests pass by more: its closeness ratio reaches `new_relative_clarity`
    # and its margin `new_previous_margin` (0: the test's own threshold). Between a passed test and
    # these, the turn is unsure.
    new_relative_clarity: float = 0.0
    new_previous_margin: float = 0.0
    # A third test, agreement (`agrees`): its own words' top source is not one of the previous turn's
    # top sources and the resolved query ranks it within its first `agree_sources` sources. With
    # `agree_role` "require", a new topic needs it too (else the turn is unsure); with "promote", an
    # unsure turn that agrees is a new topic; with "decide", it decides every unsure turn: a new topic
    # when it agrees, else a follow-up. 0: off.
    agree_sources: int = 0
    agree_role: Literal["require", "promote", "decide"] = "require"
    # What an unsure turn gets: the resolved and own rankings fused by RRF with the resolved one weighing
    # `unsure_weight` (the own one 1), or, with `unsure` off, the resolved ranking alone (a follow-up).
    # 1.3: with RRF's k = 60, every hit of the resolved ranking's first 19 outranks every hit only its own
    # words found, and hits both found move up by their own-words rank; at 1 (plain RRF) a vague
    # follow-up's own weak hits were interleaved with the resolved ones ("how much is one?"). Chosen
    # leave-one-set-out over six conversational sets (docs/conversations.md).
    unsure: bool = True
    unsure_weight: float = 1.3
    # The cross-encoder's tests (the bundled ms-marco reranker, retrieval/stages/cross_encoder.py), more
    # tests of `judge_topic` beside the cosine ones: a relevance model reads the question and a passage
    # together, so it tells "what does this question ask about" better than two embeddings' cosine. With
    # `relevance_margin`, its own words' best logit over their own first `relevance_passages` hits minus
    # their best logit over the previous turn's first hits must reach it (the previous answer does not
    # answer this question); a new topic only from `new_relevance_margin` (None: the same). With
    # `relevance_closeness`, their best logit over their own first hits minus the resolved query's over
    # its own must reach it (the relative closeness test, in logits). None: off. Shipped: 6.5 over 3
    # passages, overruling (below), unread on overlap, chosen leave-one-set-out over eight conversational
    # sets (docs/conversations.md); follow-ups score -7 to +6 there, most topic shifts 7 to 19.
    relevance_margin: float | None = 6.5
    new_relevance_margin: float | None = None
    relevance_closeness: float | None = None
    relevance_passages: int = 3
    # How the cross-encoder's margin counts: "test", one more test of `judge_topic` as above; "override", it
    # overrules the cosine tests where it is clear: below `relevance_margin` a follow-up, from
    # `new_relevance_margin` (None: never) a new topic, between them the cosine tests decide.
    relevance_role: Literal["test", "override"] = "override"
    # Whether the margin is left unread when its own first hit comes from a source of the previous turn's
    # first hits: the two sets of passages then overlap and the margin is near 0 by construction, for a
    # follow-up and a shift close to the previous topic alike. The cosine tests then decide, or, with none
    # on, the turn is unsure.
    relevance_unshared: bool = True
    # A turn that stands alone by its words (no anaphoric word, more than `short_query_words` content
    # words) is judged too, by the cross-encoder's margin alone: below `standalone_margin` a follow-up ("when
    # do the bins get emptied then?" after a garden-waste sign-up question), else it stands alone. When its
    # own first hit is from the previous turn's sources (the margin unread), `standalone_shared` says
    # what it is: "alone" (stands alone) or "judge" (the cosine tests decide, as for a cued turn). None: not
    # judged. Shipped: 1.5, "judge", chosen leave-one-set-out over fourteen conversational sets
    # (docs/conversations.md; 4.5 over ten, where every threshold from 1.0 to 7.5 scored the same); there the
    # six follow-ups without a cue whose margin is read score -1.7 to 0.6 and one 5.1, the 23 such shifts 1.7,
    # 4.1 and 6.8 to 19.4.
    standalone_margin: float | None = 1.5
    standalone_shared: Literal["alone", "judge"] = "judge"
    # A turn whose only anaphoric words are `weak_cues` ("is there a ...", "can one household ...": as often
    # not pointing back) has its own margin threshold, `weak_margin`: below it a follow-up; from it, with
    # `weak_new`, a new topic, else the cosine tests decide. None: the cue counts as any anaphoric word.
    weak_cues: frozenset[str] = frozenset({"there", "one"})
    weak_margin: float | None = None
    weak_new: bool = False
    # A short query (no anaphoric word) none of whose content words occur in the previous turn (its query
    # and first hits' text) is a new topic: "bursaries?" after an open-days question, when those pages
    # never mention bursaries. False: off.
    absent_short: bool = False
    # The union test: the cross-encoder reads the turn's own words and the resolved query with each of the
    # union of both turns' first `relevance_passages` hits; `union` is the own words' best logit minus the
    # resolved query's. A follow-up's own words need the previous question to find an answer there (-4 to
    # -13 logits), a new question finds one by itself about as well as glued to the previous one. From
    # `union_high` a new topic, below `union_low` a follow-up, overruling the margin and the cosine tests;
    # with `union_shared` also read when its own first hit is a previous source. None: that side off.
    union_low: float | None = None
    union_high: float | None = None
    union_shared: bool = False
    # What an unsure turn leans on, by the cross-encoder reading its own words with the first hit of each
    # ranking: when its own first hit answers them at least `first_hit_margin` logits better than the resolved
    # ranking's first hit does, the resolved query has lost what the turn asks ("Someone is harassing
    # passengers, how do I report that?" after a lost-property question: the glued query leads with
    # lost-property.md, 9.8 logits below its own first hit, safety-and-security.md), and the two rankings
    # are fused with the resolved one weighing `first_hit_weight` instead of `unsure_weight`. Each first hit
    # is scored with the rest of its ranking's first `relevance_passages` hits, one call per ranking
    # (`relevance`). None: off. Shipped: 8.0 and 0.5, chosen leave-one-set-out over twelve conversational
    # sets (docs/conversations.md); there the unsure follow-ups whose rankings lead with different pages score
    # at most 7.0.
    first_hit_margin: float | None = 8.0
    first_hit_weight: float = 0.5
    # And when it leans on the resolved ranking alone: an unsure turn whose own first hit is from the previous
    # turn's sources (`TopicSignals.shared`, so the margin was not read), answers its own words poorly (their
    # logit over it below `shared_first_logit`) and hardly better than the resolved ranking's first hit does
    # (by less than `shared_first_margin`) is continuing the previous topic in words too vague to search: a
    # follow-up, searched resolved ("why do you charge that?" after a speeding-ticket charge: its own words
    # lead with a page of the previous turn that does not say why, and fused they pushed the fines page
    # down). None: off. Shipped: 4.0 and -1.5, chosen leave-one-set-out over fourteen conversational sets
    # (docs/conversations.md).
    shared_first_margin: float | None = 4.0
    shared_first_logit: float = -1.5
    # Hedges for a turn the rules would let stand alone (`hedged`). After a previous turn that states a situation
    # and asks nothing (`states_situation`: "I'm picking up an electric car on Friday."), `statement_role`
    # "unsure" makes such a turn unsure: its own and the resolved rankings fused, the resolved one weighing
    # `hedge_weight` (None: `unsure_weight`); "follow-up" searches it resolved (an unsure one too); "off": no
    # hedge. `statement_cues` says which turns it reaches: "none" those without a cue, "all" every judged turn.
    # Shipped: "unsure" on turns without a cue, weighing 2.0 (every hit of the resolved ranking's first 20 ahead
    # of every hit only its own words found, those both found moved up), chosen leave-one-set-out over twenty
    # conversational sets (docs/conversations.md). Off: a turn without a cue whose margin is read and lies from
    # `standalone_margin` up to `band_margin`, or whose own first hit answers it below the logit
    # `hedge_own_first`, is unsure likewise (None: off).
    statement_role: Literal["off", "unsure", "follow-up"] = "unsure"
    statement_cues: Literal["none", "all"] = "none"
    hedge_weight: float | None = 2.0
    band_margin: float | None = None
    hedge_own_first: float | None = None


DEFAULT_RULES = Rules()


class Cue(StrEnum):
    """What makes a query a would-be follow-up (`cue`)."""

    ANAPHORIC = "anaphoric"  # an anaphoric word that points back
    WEAK = "weak"            # only `Rules.weak_cues` ("there", "one")
    SHORT = "short"          # at most `short_query_words` content words
    NONE = "none"            # stands alone by its words


class Method(StrEnum):
    NONE = "none"    # no history, or the query stands alone
    RULES = "rules"
    LLM = "llm"


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a conversation turn searched, and why."""

    query: str                 # what the turn asked
    searched: str              # what was searched
    method: Method
    reason: str = ""
    from_turn: int = 0         # the turn whose query resolved this one (0: none)
    boost_turn: int = 0        # the turn whose sources are boosted (0: none)
    boost_sources: tuple[str, ...] = ()
    # Also searched, and fused with `searched` (RRF): the query's own words, when only its
    # shortness made it a follow-up (it may open a new topic).
    alongside: str | None = None
    # Also search the query's own words, and keep them when they name a new topic (`clear_topic`,
    # `own_topic`).
    check_alone: bool = False
    # The weight of the `searched` ranking when it is fused with the `alongside` one (which weighs 1).
    searched_weight: float = 1.0
    # What made it a would-be follow-up (`cue`); NONE: it stands alone by its words and is judged all the
    # same (`Rules.standalone_margin`).
    cue: Cue = Cue.ANAPHORIC

    @property
    def resolved(self) -> bool:
        return self.method is not Method.NONE

    @property
    def own_words(self) -> str | None:
        """The query's own words when they are searched besides `searched` (fused or checked)."""
        return self.query if self.alongside is not None or self.check_alone else None


def _words(query: str) -> tuple[list[str], list[int]]:
    """The query's words, lower-cased, and for each the index of the first word of its clause."""
    words, starts = [], []
    start, end = 0, 0
    for match in _WORD.finditer(query):
        if _CLAUSE_END.search(query, end, match.start()):
            start = len(words)
        words.append(match.group().lower())
        starts.append(start)
        end = match.end()
    return words, starts


def _points_back(words: Sequence[str], i: int, rules: Rules, clause: int = 0) -> bool:
    """Whether the anaphoric word `words[i]` refers to something said before; `clause` is the index of the
    first word of its clause."""
    word = words[i]
    before = words[i - 1] if i > 0 else ""
    after = words[i + 1] if i + 1 < len(words) else ""
    then = words[i + 2] if i + 2 < len(words) else ""
    if rules.existential_there and word == "there" and (before in _BE or after in _BE):
        return False
    # A number stands after a function word ("can one workspace", "for one week"), a stand-in
    # after a determiner or an adjective ("the cheapest one cost").
    if rules.numeral_one and word == "one" and before not in _ONE_HEADS and (before in STOP_WORDS or not before) \
            and (after == "of" or (after and after not in STOP_WORDS)):
        return False
    if rules.empty_it and word == "it" and (after in _EMPTY_IT_VERBS or (after in _BE and then in ("raining", "snowing"))):
        return False
    if (rules.empty_it or rules.extraposed_it) and word == "it":
        # Extraposition: "is it possible to ...", "it is safe to ...", "it's ok to ...".
        if before in _BE and after not in STOP_WORDS and then == "to":
            return False
        if after in _BE and then not in STOP_WORDS and words[i + 3:i + 4] == ["to"]:
            return False
    if rules.determiner and word in ("this", "that", "these", "those") and after and \
            after not in STOP_WORDS and after not in ANAPHORS:
        return False
    if rules.antecedent_words and len(_content(words[:i])) >= rules.antecedent_words:
        return False
    if rules.clause_words and clause and word in _PRONOUNS and len(_content(words[:clause])) >= rules.clause_words:
        return False
    if rules.measure_it and word == "it" and after in _MEASURE_VERBS and then == "to":
        return False
    return True


def _content(words: Sequence[str]) -> list[str]:
    return [w for w in words if w not in STOP_WORDS and w not in ANAPHORS]


def detect(query: str, short_query_words: int, rules: Rules = DEFAULT_RULES) -> str | None:
    """Why `query` reads as a follow-up, or None when it stands alone."""
    words, clauses = _words(query)
    anaphors = [w for i, w in enumerate(words) if w in ANAPHORS and _points_back(words, i, rules, clauses[i])]
    if anaphors:
        return f"anaphoric word {anaphors[0]!r}"
    content = [w for w in words if w not in STOP_WORDS]
    if len(content) <= short_query_words:
        return f"short query ({len(content)} content word{'s' if len(content) != 1 else ''})"
    return None


def cue(query: str, short_query_words: int, rules: Rules = DEFAULT_RULES) -> Cue:
    """What makes `query` a would-be follow-up (`detect`), with weak cues apart."""
    words, clauses = _words(query)
    anaphors = {w for i, w in enumerate(words) if w in ANAPHORS and _points_back(words, i, rules, clauses[i])}
    if anaphors:
        return Cue.WEAK if rules.weak_margin is not None and anaphors <= rules.weak_cues else Cue.ANAPHORIC
    return Cue.SHORT if len([w for w in words if w not in STOP_WORDS]) <= short_query_words else Cue.NONE


def absent_words(query: str, previous_query: str, passages: Sequence[str]) -> bool | None:
    """Whether none of `query`'s content words (stemmed as BM25 does) occur in the previous turn: its
    query and its first hits' `passages`. None: no content word."""
    content = _content([w.lower() for w in _WORD.findall(query)])
    if not content:
        return None
    seen = set(_STEMS.terms(" ".join((previous_query, *passages))))
    return not any(set(_STEMS.terms(w)) & seen for w in content)


def new_topic(query: str, reason: str, rules: Rules, topic: frozenset[str]) -> str | None:
    """Why a would-be follow-up (`reason` from `detect`) opens a new topic instead, or None.

    `topic`: stems of the previous topic (`topic_stems`).
    """
    if not rules.min_overlap or not topic:
        return None
    content = _content([w.lower() for w in _WORD.findall(query)])
    if not content or (reason.startswith("anaphoric") and not (rules.shift_words and len(content) >= rules.shift_words)):
        return None
    shared = [w for w in content if set(_STEMS.terms(w)) & topic]
    if len(shared) >= rules.min_overlap * len(content):
        return None
    return f"new topic: {len(shared)} of {len(content)} content words in the previous topic"


def topic_stems(anchor_query: str, sources: Sequence[str], texts: Sequence[str] = ()) -> frozenset[str]:
    """Stems of the previous topic: the anchor's query, the names of the previous turn's sources
    (`support/docs/storage-classes.md` -> storage, class) and those sources' text."""
    names = " ".join(s.rsplit("/", 1)[-1].rsplit(".", 1)[0].replace("-", " ") for s in sources)
    return frozenset(_STEMS.terms(" ".join((anchor_query, names, *texts))))


def anchor(turns: Sequence[Turn]) -> Turn | None:
    """The most recent turn that stood alone (else the oldest one held)."""
    for turn in reversed(turns):
        if not turn.resolved_from:
            return turn
    return turns[0] if turns else None


def resolve_rules(query: str, turns: Sequence[Turn], short_query_words: int, boost_sources: int,
                  max_chars: int, rules: Rules = DEFAULT_RULES, topic: frozenset[str] = frozenset()) -> Resolution:
    """`topic`: stems of the previous topic, for `rules.min_overlap` (empty: not judged)."""
    if not turns:
        return Resolution(query, query, Method.NONE, "no earlier turn")
    reason = detect(query, short_query_words, rules)
    if reason is None and not rules.standalone:
        return Resolution(query, query, Method.NONE, "stands alone")
    kind = cue(query, short_query_words, rules)
    reason = reason or "stands alone by its words (judged by the cross-encoder's margin)"
    shift = new_topic(query, reason, rules, topic)
    if shift is not None:
        return Resolution(query, query, Method.NONE, shift)
    base = anchor(turns)
    assert base is not None
    searched = f"{base.query} {query}"
    if len(searched) > max_chars:
        searched = f"{base.query[:max(0, max_chars - len(query) - 1)]} {query}"
    previous = turns[-1]
    return Resolution(query, searched, Method.RULES, reason, from_turn=base.turn, boost_turn=previous.turn,
                      boost_sources=previous.sources[:boost_sources],
                      alongside=query if rules.short_alongside and reason.startswith("short query") else None,
                      check_alone=rules.clear_cosine > 0 or rules.relative or kind is Cue.NONE or (
                          rules.agree_chunks > 0 and (rules.check_short or reason.startswith("anaphoric"))),
                      cue=kind)


def own_topic(alone: Sequence[str], resolved: Sequence[str], previous: Sequence[str], agree_chunks: int) -> str | None:
    """Why a resolved follow-up is a new topic after all, judged on both searches' results, or None.

    `alone`, `resolved`: the qualified source (namespace/collection/sourceId) of each hit, in rank
    order, of the query's own words and of the resolved query; `previous`: the previous turn's
    boosted sources. "Is there nightly backup of every volume?" after a refunds question: its own
    top hit is backups.md, not a refunds source, and the glued query ranks backups.md 2nd.
    """
    if not agree_chunks or not alone or alone[0] in previous:
        return None
    top = alone[0]
    rank = next((i for i, source in enumerate(resolved[:agree_chunks], start=1) if source == top), None)
    if rank is None:
        return None
    name = top.split("/", 2)[-1]
    return f"new topic: its own top hit ({name}) is not from the previous sources, and the resolved query ranks it {rank}"


def clarity(hits: Sequence[Hit]) -> float | None:
    """The best dense cosine among `hits` (their `dense` signal), or None when none carries one."""
    cosines = [score.raw for hit in hits for score in hit.provenance.scores if score.signal == "dense"]
    return max(cosines) if cosines else None


# Own hits embedded to judge a follow-up found without a dense signal (`embedded_clarity`).
CLARITY_PASSAGES = 3
# Question and passage tokens the cross-encoder reads to judge a follow-up's topic (the reranker's default).
TOPIC_TOKENS = 256


def relevance(model, query: str, *groups: Sequence[str]) -> list[float | None]:
    """The best cross-encoder logit of `query` over each group of passages (`model`:
    cross_encoder.CrossEncoderModel), None for a group without a passage. Each group is scored in a call
    of its own, as the thresholds were chosen: the int8 model's activations are quantised per batch, so
    the same pair scored beside other passages moves by up to ~0.4 logits."""
    return [max(group) if group else None for group in logits(model, query, *groups)]


def logits(model, query: str, *groups: Sequence[str]) -> list[list[float]]:
    """The cross-encoder's logit of `query` with each passage of each group, in order (blank passages left
    out, an empty list for a group without any), each group in a call of its own (`relevance`)."""
    kept = [[text for text in group if text.strip()] for group in groups]
    return [list(model.score(query, group, TOPIC_TOKENS)) if group else [] for group in kept]


def leans_own(signals: TopicSignals, rules: Rules) -> str | None:
    """Why an unsure turn's fusion leans on its own words (`Rules.first_hit_margin`), or None.

    "Someone is harassing passengers, how do I report that?" after a lost-property question: the cross-encoder
    finds its own first hit (safety-and-security.md) answers it 9.8 logits better than the glued query's first
    hit (lost-property.md) does: the glued query lost what it asks.
    """
    if rules.first_hit_margin is None or signals.own_first is None or signals.own_on_resolved_first is None:
        return None
    gap = signals.own_first - signals.own_on_resolved_first
    if gap < rules.first_hit_margin:
        return None
    return f"cross-encoder: its own first hit answers it {gap:+.2f} better than the resolved query's first hit " \
           f"(>= {rules.first_hit_margin}): the resolved ranking weighs {rules.first_hit_weight}"


def leans_resolved(signals: TopicSignals, rules: Rules) -> str | None:
    """Why an unsure turn is searched resolved alone (`Rules.shared_first_margin`), or None.

    "why do you charge that?" after a speeding-ticket charge: its own first hit is electric-cars.md, one of the
    previous turn's pages, at -1.7 logits, and the glued query's first hit (traffic-fines-and-tolls.md) answers
    it 2.3 logits better still: its words add nothing to search by, and the glued ranking alone is kept.
    """
    if rules.shared_first_margin is None or not signals.shared or signals.own_first is None \
            or signals.own_on_resolved_first is None or signals.own_first >= rules.shared_first_logit:
        return None
    gap = signals.own_first - signals.own_on_resolved_first
    if gap >= rules.shared_first_margin:
        return None
    return f"follow-up: its own first hit is a previous source that answers it poorly (cross-encoder: " \
           f"{signals.own_first:+.2f}, < {rules.shared_first_logit}) and only {gap:+.2f} better than the resolved " \
           f"query's first hit (< {rules.shared_first_margin}): searched resolved"


def embedded_clarity(embedder: Embedder, query: str, hits: Sequence[Hit], tenant: str = "") -> float | None:
    """The best cosine between `query` and the text of its first `CLARITY_PASSAGES` hits, embedded
    now: what `clarity` reads from the dense signal, for hits a search without one found (mode:
    sparse). The passage is the hit's title and content, as embedded at ingest."""
    return closeness(embedder, query, list(map(passage_text, hits[:CLARITY_PASSAGES])), tenant)


def closeness(embedder: Embedder, query: str, passages: Sequence[str], tenant: str = "") -> float | None:
    """The best cosine between `query` and `passages`, embedded now (None without a passage)."""
    texts = [text for text in passages if text.strip()]
    if not texts:
        return None
    question = np.asarray(embedder.embed_query(query, tenant), dtype=np.float32)
    passages = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
    norms = np.linalg.norm(passages, axis=1) * np.linalg.norm(question)
    return float(np.max(passages @ question / np.where(norms > 0, norms, 1.0)))


def clear_topic(cosine: float | None, clear_cosine: float) -> str | None:
    """Why a would-be follow-up is a new topic by its own hits' closeness (`clarity`), or None.

    "Is there nightly backup of every volume?" finds backups.md at cosine 0.6 by its own words; "who
    can request one?" finds nothing closer than 0.3 and needs the previous question.
    """
    if not clear_cosine or cosine is None or cosine < clear_cosine:
        return None
    return f"new topic: its own words find a close match (cosine {cosine:.3f} >= {clear_cosine})"


class Topic(StrEnum):
    """What the relative topic check (`judge_topic`) makes of a would-be follow-up."""

    NEW = "new topic"      # keeps its own hits and stands alone
    UNSURE = "unsure"      # the resolved and own rankings fused (RRF)
    FOLLOW_UP = "follow-up"  # keeps the resolved hits


@dataclass(frozen=True, slots=True)
class TopicSignals:
    """Cosines (the bundled embedder's) a would-be follow-up is judged by; None: not measurable."""

    own: float | None       # its own words to their first hits (`clarity`)
    resolved: float | None  # the resolved query to its first hits
    previous: float | None  # its own words to the previous turn's first hits
    own_from: str = "dense signal"  # or "embedded (first N own hits)" (`embedded_clarity`)
    # The cross-encoder's best logits (`Rules.relevance_margin`, `relevance_closeness`): its own words over
    # their own first hits, over the previous turn's, and the resolved query over its own.
    own_relevance: float | None = None
    previous_relevance: float | None = None
    resolved_relevance: float | None = None
    # Its own first hit comes from a source of the previous turn's first hits (`Rules.relevance_unshared`).
    shared: bool = False
    # None of its content words occur in the previous turn (`absent_words`, `Rules.absent_short`); None: not read.
    absent: bool | None = None
    # The resolved query's best logit over both turns' first hits (`Rules.union_low`, `union_high`).
    union_resolved: float | None = None
    # The cross-encoder's logits of its own words over its own first hit and over the resolved ranking's
    # first hit (`Rules.first_hit_margin`, `leans_own`); None: not read.
    own_first: float | None = None
    own_on_resolved_first: float | None = None
    # The previous turn states a situation and asks nothing (`states_situation`, `Rules.statement_role`).
    previous_states: bool = False


def judge_standalone(signals: TopicSignals, rules: Rules) -> tuple[Topic, str]:
    """A turn that stands alone by its words, judged by the cross-encoder's margin (`Rules.standalone_margin`).

    "when do the bins get emptied then?" after a garden-waste sign-up question: the sign-up pages answer
    it about as well as its own first hits (margin 0.6): a follow-up. "sharps box collection" after a
    missed-bin question: its own hits answer it 18 logits better: it stands alone.
    """
    assert rules.standalone_margin is not None
    if rules.relevance_unshared and signals.shared:
        if rules.standalone_shared == "judge":
            return judge_topic(signals, rules)
        return Topic.NEW, "stands alone: its own first hit is from the previous turn's sources (the " \
                          "cross-encoder's margin is not read)"
    if signals.own_relevance is None or signals.previous_relevance is None:
        return Topic.NEW, "stands alone: its own words found nothing to judge"
    margin = signals.own_relevance - signals.previous_relevance
    if margin < rules.standalone_margin:
        return Topic.FOLLOW_UP, f"follow-up: no anaphoric word, but cross-encoder: own hits answer it only " \
                                f"{margin:+.2f} better than the previous turn's (< {rules.standalone_margin})"
    return Topic.NEW, f"stands alone: cross-encoder: own hits answer it {margin:+.2f} better than the " \
                      f"previous turn's (>= {rules.standalone_margin})"


def states_situation(query: str) -> bool:
    """Whether `query` states something and asks nothing: no question mark, no question word first, a sentence
    rather than a few keywords. "I'm picking up an electric car on Friday." does; "How do I cancel?",
    "how do I reset my password" and "refund policy" do not."""
    words = [w.lower() for w in _WORD.findall(query)]
    return "?" not in query and len(words) >= _STATEMENT_WORDS and words[0] not in _QUESTION_OPENERS


def hedged(topic: Topic, signals: TopicSignals, rules: Rules, kind: Cue) -> tuple[Topic, str] | None:
    """What a turn the rules take for a new topic (`topic`) becomes under the hedges (`Rules.band_margin`,
    `hedge_own_first`, `statement_role`), and why; None: no hedge applies.

    "can we move to another room?" after "The people in the room next to ours have been playing loud music since
    midnight.": no cue, its own hits answer it 11.6 logits better than the previous turn's, but the previous turn
    asked nothing; with `statement_role` "unsure", the glued and own rankings are fused.
    """
    states = rules.statement_role != "off" and signals.previous_states and \
        (kind is Cue.NONE or rules.statement_cues == "all")
    if states and (topic is Topic.NEW or (topic is Topic.UNSURE and rules.statement_role == "follow-up")):
        return (Topic.UNSURE if rules.statement_role == "unsure" and topic is Topic.NEW else Topic.FOLLOW_UP,
                f"the previous turn states a situation and asks nothing ({rules.statement_role})")
    if topic is not Topic.NEW or kind is not Cue.NONE or signals.shared:
        return None
    if rules.band_margin is not None and signals.own_relevance is not None and signals.previous_relevance is not None:
        margin = signals.own_relevance - signals.previous_relevance
        if margin < rules.band_margin:
            return Topic.UNSURE, f"no anaphoric word, and its own hits answer it only {margin:+.2f} better than " \
                                 f"the previous turn's (< {rules.band_margin}): unsure"
    first = signals.own_first
    if rules.hedge_own_first is not None and first is not None and first < rules.hedge_own_first:
        return Topic.UNSURE, f"no anaphoric word, and its own first hit answers it poorly (cross-encoder: " \
                             f"{first:+.2f}, < {rules.hedge_own_first}): unsure"
    return None


@dataclass(frozen=True, slots=True)
class Settled:
    """What a judged turn becomes after the hedges and an unsure turn's leans (`settle`)."""

    topic: Topic
    weight: float                  # the resolved ranking's weight when the turn is unsure (own ranking: 1)
    hedge: str | None = None       # why a hedge changed the topic (`hedged`)
    lean: str | None = None        # why an unsure turn leans on its own words (`leans_own`)
    resolved: str | None = None    # why an unsure turn is searched resolved alone (`leans_resolved`)


def settle(topic: Topic, signals: TopicSignals, rules: Rules, kind: Cue) -> Settled:
    """`topic`, as judged (`judge_turn`), after the hedges (`hedged`, which take the place of the leans) and, for an
    unsure turn, its leans: on its own words (`leans_own`, the resolved ranking weighing `first_hit_weight`) or on
    the resolved query alone (`leans_resolved`, a follow-up)."""
    hedge = hedged(topic, signals, rules, kind)
    if hedge is not None:
        return Settled(hedge[0], rules.unsure_weight if rules.hedge_weight is None else rules.hedge_weight,
                       hedge=hedge[1])
    if topic is not Topic.UNSURE:
        return Settled(topic, rules.unsure_weight)
    if lean := leans_own(signals, rules):
        return Settled(topic, rules.first_hit_weight, lean=lean)
    if resolved := leans_resolved(signals, rules):
        return Settled(Topic.FOLLOW_UP, rules.unsure_weight, resolved=resolved)
    return Settled(topic, rules.unsure_weight)


def judge_turn(signals: TopicSignals, rules: Rules, kind: Cue, agree: bool | None = None) -> tuple[Topic, str]:
    """`judge_topic` for a would-be follow-up of cue `kind`: a turn without a cue by `judge_standalone`, a
    weak cue's with its own margin (`Rules.weak_margin`), a short query absent from the previous turn
    (`Rules.absent_short`) as a new topic."""
    if kind is Cue.NONE:
        return judge_standalone(signals, rules)
    if kind is Cue.SHORT and rules.absent_short and signals.absent:
        return Topic.NEW, "new topic: none of its words occur in the previous turn (its query and first hits)"
    if kind is Cue.WEAK and rules.weak_margin is not None and rules.relevance_role == "override":
        rules = replace(rules, relevance_margin=rules.weak_margin,
                        new_relevance_margin=rules.weak_margin if rules.weak_new else rules.new_relevance_margin)
    return judge_topic(signals, rules, agree)


def judge_topic(signals: TopicSignals, rules: Rules, agree: bool | None = None) -> tuple[Topic, str]:
    """The relative topic check (`Rules.relative_clarity`, `Rules.previous_margin`) and why.

    "Is it possible to use SAML single sign-on on the Team plan?" after an invoices question: its words
    find their best hit at 0.589 while the glued query finds its own at 0.539 (1.09x), and the invoice
    hits are far from it (0.188): a new topic. "who can request one?" after a refunds question finds
    its best hit at 0.274, 0.42x the glued query's, and only 0.144 closer than the refunds hits: a
    follow-up. `agree`: the agreement test (`agrees`), when `Rules.agree_sources` is on.
    """
    own, resolved, previous = signals.own, signals.resolved, signals.previous
    if own is None if rules.cosines else signals.own_relevance is None:
        return Topic.FOLLOW_UP, "its own words found nothing to judge"
    tests = []  # (passed, passed by the new-topic threshold, why)
    if rules.relative_clarity > 0 and own is not None and resolved is not None and resolved > 0:
        ratio = own / resolved
        bar = max(rules.relative_clarity, rules.new_relative_clarity)
        tests.append((ratio >= rules.relative_clarity, ratio >= bar,
                      f"own closeness {own:.3f} is {ratio:.2f}x the resolved query's {resolved:.3f} "
                      f"({'>=' if ratio >= rules.relative_clarity else '<'} {rules.relative_clarity}"
                      + (f", new topic from {bar}" if bar > rules.relative_clarity else "") + ")"))
    if rules.previous_margin > 0 and own is not None:
        margin = own - (previous if previous is not None else 0.0)
        bar = max(rules.previous_margin, rules.new_previous_margin)
        tests.append((margin >= rules.previous_margin, margin >= bar,
                      f"own hits {margin:+.3f} closer than the previous turn's "
                      f"({'>=' if margin >= rules.previous_margin else '<'} {rules.previous_margin}"
                      + (f", new topic from {bar}" if bar > rules.previous_margin else "") + ")"))
    override = None  # (the topic, why) when the cross-encoder's margin overrules the cosine tests
    note = ""  # the margin, when it was read and left the verdict to the cosine tests
    unread = rules.relevance_unshared and signals.shared
    if rules.union and (not unread or rules.union_shared) and signals.union_resolved is not None \
            and signals.own_relevance is not None and signals.previous_relevance is not None:
        union = max(signals.own_relevance, signals.previous_relevance) - signals.union_resolved
        if rules.union_high is not None and union >= rules.union_high:
            return Topic.NEW, f"new topic: cross-encoder: over both turns' first hits its own words find an " \
                              f"answer {union:+.2f} against the resolved query's (>= {rules.union_high})"
        if rules.union_low is not None and union < rules.union_low:
            return Topic.FOLLOW_UP, f"follow-up: cross-encoder: over both turns' first hits its own words find " \
                                    f"an answer {union:+.2f} against the resolved query's (< {rules.union_low})"
    if unread and not rules.cosines and rules.relevance_closeness is None:
        if rules.unsure:
            return Topic.UNSURE, "unsure, resolved and own hits fused: its own first hit is from the previous " \
                                 "turn's sources (the cross-encoder's margin is not read)"
        return Topic.FOLLOW_UP, "follow-up: its own first hit is from the previous turn's sources"
    if unread:
        pass
    elif rules.relevance_margin is not None and rules.relevance_role == "override" \
            and signals.own_relevance is not None and signals.previous_relevance is not None:
        margin = signals.own_relevance - signals.previous_relevance
        high = rules.new_relevance_margin
        if margin < rules.relevance_margin:
            override = Topic.FOLLOW_UP, f"cross-encoder: own hits answer it only {margin:+.2f} better than the " \
                                        f"previous turn's (< {rules.relevance_margin})"
        elif high is not None and margin >= high:
            override = Topic.NEW, f"cross-encoder: own hits answer it {margin:+.2f} better than the previous " \
                                  f"turn's (>= {high})"
        else:
            note = f"cross-encoder: own hits answer it {margin:+.2f} better than the previous turn's " \
                   f"(>= {rules.relevance_margin}: the cosine tests decide)"
    elif rules.relevance_margin is not None and signals.own_relevance is not None \
            and signals.previous_relevance is not None:
        margin = signals.own_relevance - signals.previous_relevance
        bar = max(rules.relevance_margin, rules.relevance_margin if rules.new_relevance_margin is None
                  else rules.new_relevance_margin)
        tests.append((margin >= rules.relevance_margin, margin >= bar,
                      f"cross-encoder: own hits answer it {margin:+.2f} better than the previous turn's "
                      f"({'>=' if margin >= rules.relevance_margin else '<'} {rules.relevance_margin}"
                      + (f", new topic from {bar}" if bar > rules.relevance_margin else "") + ")"))
    if rules.relevance_closeness is not None and not unread and signals.own_relevance is not None \
            and signals.resolved_relevance is not None:
        gap = signals.own_relevance - signals.resolved_relevance
        tests.append((gap >= rules.relevance_closeness, gap >= rules.relevance_closeness,
                      f"cross-encoder: own hits answer it {gap:+.2f} against the resolved query's "
                      f"({'>=' if gap >= rules.relevance_closeness else '<'} {rules.relevance_closeness})"))
    passed = sum(ok for ok, _, _ in tests)
    new = bool(tests) and all(clear for _, clear, _ in tests)
    why = "; ".join(text for _, _, text in tests)
    if override is not None:
        topic, because = override
        return topic, f"{topic.value}: {because}" + (f"; {why}" if why else "")
    if note:
        why = f"{why}; {note}" if why else note
    if rules.agree_sources and agree is not None:
        why += f"; the resolved query {'ranks' if agree else 'does not rank'} its own top source " \
               f"(not a previous one) within its first {rules.agree_sources}"
        if rules.agree_role == "require":
            new = new and agree
        elif passed and not new:
            new = agree
            if rules.agree_role == "decide" and not agree:
                return Topic.FOLLOW_UP, f"follow-up: {why}"
    if new:
        return Topic.NEW, f"new topic: {why}"
    if passed and rules.unsure:
        return Topic.UNSURE, f"unsure, resolved and own hits fused: {why}"
    return Topic.FOLLOW_UP, f"follow-up: {why}"


def agrees(alone: Sequence[str], resolved: Sequence[str], previous: Sequence[str], sources: int) -> bool:
    """The agreement test: the first of `alone` (the own words' hits' sources, in rank order) is not
    one of `previous` (the previous turn's top sources) and is among the first `sources` distinct
    sources of `resolved` (the resolved query's)."""
    if not alone or alone[0] in previous:
        return False
    return alone[0] in list(dict.fromkeys(resolved))[:sources]


def with_own_topic(resolution: Resolution, reason: str) -> Resolution:
    """The resolution of a turn that `own_topic` found to be a new topic: it stands alone."""
    return Resolution(resolution.query, resolution.query, Method.NONE, reason)


_SYSTEM = ("You rewrite the last message of a search conversation into one standalone search query. "
           "Replace pronouns and references with what they refer to in the earlier messages. If the last "
           "message already stands alone, return it unchanged. Answer only JSON: "
           '{"query": "<standalone query>", "followUp": true|false}')


async def resolve_llm(client: ChatClient, query: str, turns: Sequence[Turn], boost_sources: int,
                      max_chars: int) -> Resolution:
    """The model's standalone rewrite; raises UpstreamUnavailable (the caller falls back to rules)."""
    if not turns:
        return Resolution(query, query, Method.NONE, "no earlier turn")
    history = "\n".join(f"{t.turn}. {t.query}" for t in turns[-3:])
    answer = await client.complete_json(_SYSTEM, f"Earlier messages:\n{history}\nLast message: {query}")
    rewritten = answer.get("query")
    follow_up = answer.get("followUp", True)
    if not isinstance(rewritten, str) or not rewritten.strip():
        raise UpstreamUnavailable(f"language model {client.model!r} answered without a 'query' string")
    rewritten = rewritten.strip()[:max_chars]
    if follow_up is False or rewritten == query:
        return Resolution(query, rewritten, Method.NONE, "stands alone (language model)")
    previous = turns[-1]
    return Resolution(query, rewritten, Method.LLM, "rewritten by the language model",
                      from_turn=previous.turn, boost_turn=previous.turn,
                      boost_sources=previous.sources[:boost_sources])


def boost(hits: Sequence[Hit], sources: Sequence[str], factor: float) -> tuple[list[Hit], list[str]]:
    """Hits from `sources` (namespace/collection/sourceId) scored `score * (1 + factor)`, re-sorted.

    Returns the new ranking and the qualified ids that were boosted; the boost is recorded as a
    `followUp:boost` signal in each boosted hit's provenance.
    """
    wanted = set(sources)
    out, boosted = [], []
    for rank, hit in enumerate(hits, start=1):
        if f"{hit.namespace}/{hit.collection}/{hit.source_id}" in wanted and factor > 0:
            # raw: the multiplier; rank: the hit's rank before the boost.
            scores = hit.provenance.scores + (SignalScore("followUp:boost", 1.0 + factor, rank),)
            out.append(replace(hit, score=hit.score * (1.0 + factor),
                               provenance=replace(hit.provenance, scores=scores)))
            boosted.append(hit.qualified_id)
        else:
            out.append(hit)
    out.sort(key=lambda h: (-h.score, h.qualified_id))
    return out, boosted
