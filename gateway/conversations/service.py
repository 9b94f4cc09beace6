"""The conversation service: read a conversation's turns, resolve a follow-up, record the turn.

The searcher calls `begin` before routing (what to search) and `finish` after the hits are
final (boost the previous turn's sources, record the turn); both are trace stages.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gateway.admission.cost import CROSS_ENCODER_PER_HIT_256, HIGHLIGHT_SENTENCE, LLM_CALL
from gateway.admission.scheduler import offload
from gateway.conversations.followup import (CLARITY_PASSAGES, DEFAULT_RULES, TOPIC_TOKENS, Cue, Method, Resolution,
                                            Rules, Topic, TopicSignals, absent_words, agrees, anchor, boost, clarity,
                                            clear_topic, closeness, detect, embedded_clarity, judge_turn, logits,
                                            own_topic, relevance, resolve_llm, resolve_rules, settle,
                                            states_situation, topic_stems, with_own_topic)
from gateway.conversations.identifiers import check_conversation_id, stored_conversation_id
from gateway.conversations.turns import Turn, TurnStore
from gateway.embedding.base import Embedder
from gateway.embedding.models import CROSS_ENCODER, PACKAGED, ModelSource
from gateway.errors import InvalidInput, UpstreamUnavailable
from gateway.retrieval.hit import Hit, passage_text
from gateway.retrieval.llm import ChatClient, chat_client
from gateway.retrieval.trace import Phase, TraceRecorder
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope
from gateway.tenancy.config import ConversationConfig
from gateway.tenancy.derived import PerTenant
from gateway.tenancy.registry import TenantRegistry

# Turns a resolution reads: the anchor is usually one or two turns back.
HISTORY = 5
# Cost units of recording a turn: an insert, a flush and a delete of old turns (admission/cost.py scale).
TURN_WRITE = 20
# Chunks of a previous top source read to learn what the conversation was about: enough for its
# vocabulary, and bounded, so that a short follow-up after a 10,000-chunk manual costs what any does.
TOPIC_CHUNKS = 32
# Embedding a question and CLARITY_PASSAGES passages of up to 256 tokens (followup.embedded_clarity):
# a 300-character sentence costs HIGHLIGHT_SENTENCE units (17 ms of CPU); three 256-token passages
# and a question took 370 ms of CPU (23 ms for short tickets), so a full passage counts eight times that.
CLARITY_EMBEDDING = HIGHLIGHT_SENTENCE * (1 + 8 * CLARITY_PASSAGES)
# The relative topic check (`Rules.relative`) embeds up to three such sets: the previous turn's first
# hits (always), and the own and the resolved query's first hits when a sparse search found them
# without a dense signal; it is charged for the three. Reading the previous turn's hits: one row each.
RELATIVE_EMBEDDINGS = 3


def relevance_cost(rules: Rules) -> int:
    """Cost units of the cross-encoder's tests (`Rules.relevance`): its own words against its own first
    `relevance_passages` hits and the previous turn's, with `first_hit_margin` or `shared_first_margin` also the
    resolved query's, and with `relevance_closeness` the resolved query against its own, each pair a reranked
    hit at TOPIC_TOKENS (admission/cost.py)."""
    if not rules.relevance:
        return 0
    # Own words over own and previous hits (and the resolved ones: first_hit_margin, shared_first_margin); the
    # resolved query over its own (closeness) or over both (union).
    first_hits = rules.first_hit_margin is not None or rules.shared_first_margin is not None
    pairs = rules.relevance_passages * (2 + first_hits + (rules.relevance_closeness is not None) + 2 * rules.union)
    return pairs * CROSS_ENCODER_PER_HIT_256 * TOPIC_TOKENS // 256


def turn_cost(config: ConversationConfig, search: int = 0, rules: Rules = DEFAULT_RULES) -> int:
    """What `conversationId` adds to a search's cost: reading up to 4 x max_turns rows, the chunks
    of the previous turn's top sources a follow-up's words are compared with (TOPIC_CHUNKS each, with
    `Rules.min_overlap`), embedding hits' passages to judge its topic (`Rules.cosines`: the previous
    turn's first hits and, for a sparse search, its own and the resolved query's, RELATIVE_EMBEDDINGS x
    CLARITY_EMBEDDING; `Rules.clear_cosine` alone: its own, CLARITY_EMBEDDING), the cross-encoder's
    pairs (`relevance_cost`), writing a turn, one
    language-model call when the tenant resolves with one, and, when a follow-up is also searched by
    its own words (`Rules.relative`, `clear_cosine`, `agree_chunks`, `short_alongside`), that search:
    `search` is the cost of the search itself."""
    resolving = config.resolve != "off"
    topic = TOPIC_CHUNKS * rules.topic_sources if resolving and rules.min_overlap else 0
    own = search if resolving and (rules.clear_cosine or rules.relative or rules.agree_chunks
                                   or rules.short_alongside) else 0
    embedded = 0
    if resolving and rules.relative:
        embedded = RELATIVE_EMBEDDINGS * CLARITY_EMBEDDING + CLARITY_PASSAGES if rules.cosines else CLARITY_PASSAGES
        embedded += relevance_cost(rules)
    elif resolving and rules.clear_cosine:
        embedded = CLARITY_EMBEDDING
    return 4 * config.max_turns + topic + TURN_WRITE + own + embedded + (LLM_CALL if config.resolve == "llm" else 0)


@dataclass(frozen=True, slots=True)
class Pending:
    """A turn being answered: its conversation, what was resolved, and the turns read."""

    conversation_id: str
    resolution: Resolution
    number: int
    stored_id: str  # the id its turns are stored under (identifiers.stored_conversation_id)
    # The previous turn's first hits (qualified chunk ids) and its query, for the relative topic check.
    previous_hits: tuple[str, ...] = ()
    previous_query: str = ""


class Conversations:
    """Conversation memory for every tenant; the tenant always comes from the caller's principal."""

    def __init__(self, registry: TenantRegistry, store: MilvusStore, environ: Mapping[str, str], *,
                 max_query_chars: int = 2000, clock=time.time, rules: Rules = DEFAULT_RULES,
                 model_source: ModelSource = PACKAGED) -> None:
        self._registry = registry
        self._store = store
        self._rules = rules
        # For tenants that judge only cued turns (`conversations.judge_without_cue: false`).
        self._cued_only = replace(rules, standalone_margin=None)
        self._model_source = model_source
        if rules.relevance:
            model_source.verify(CROSS_ENCODER)  # a missing or altered file stops start-up, not the first follow-up
        self._turns = TurnStore(store, clock)
        self._max_chars = max_query_chars
        # Current as tenants change at runtime (the platform API, reloaded tenant files).
        self._llm: PerTenant[ChatClient | None] = PerTenant(
            registry.get, lambda t: chat_client(t, environ) if t.conversations.resolve == "llm" else None)

    async def begin(self, tenant: str, conversation_id: str, query: str, recorder: TraceRecorder, *,
                    user_id: str | None = None) -> Pending:
        """Read the conversation and resolve `query` against it. `user_id` is the caller's key's
        bound user, if any: such a key reads and writes only its own conversations."""
        check_conversation_id(conversation_id)
        stored = stored_conversation_id(conversation_id, user_id)
        config = self._registry.get(tenant).conversations
        with recorder.stage("followUp", Phase.QUERY, input_count=1) as stage:
            turns = await offload(self._turns.recent, tenant, stored, HISTORY, config.max_turns)
            if config.resolve == "off":
                resolution = Resolution(query, query, Method.NONE, "resolve: off")
            else:
                topic: frozenset[str] = frozenset()
                if turns and self._rules.min_overlap and detect(query, config.short_query_words, self._rules):
                    topic = await offload(self._topic, tenant, turns, self._rules.topic_sources)
                rules = self._rules if config.judge_without_cue else self._cued_only
                resolution = resolve_rules(query, turns, config.short_query_words, config.boost_sources,
                                           self._max_chars, rules, topic)
            if config.resolve == "llm" and turns:
                try:
                    resolution = await resolve_llm(self._llm.get(tenant), query, turns, config.boost_sources,
                                                   self._max_chars)
                except UpstreamUnavailable as exc:
                    stage.warn(f"language-model rewrite failed, resolved by rules instead: {exc.message}")
            stage.detail.update(_detail(conversation_id, resolution, turns))
            stage.texts([resolution.searched])
        number = (turns[-1].turn if turns else 0) + 1
        return Pending(conversation_id, resolution, number, stored,
                       previous_hits=turns[-1].hits[:CLARITY_PASSAGES] if turns else (),
                       previous_query=turns[-1].query if turns else "")

    def _topic(self, tenant: str, turns: Sequence[Turn], top_sources: int) -> frozenset[str]:
        """Stems of what the conversation was about: the anchor's query and the text of the previous
        turn's top sources (read with the tenant boundary; a source deleted since reads as empty)."""
        sources = turns[-1].sources[:top_sources]
        texts = []
        for qualified in sources:
            namespace, collection, source_id = qualified.split("/", 2)
            scope = Scope(tenant, namespace, collection)
            if self._store.exists(scope):
                texts.extend(chunk.text for chunk in self._store.source_chunks(scope, source_id, limit=TOPIC_CHUNKS))
        base = anchor(turns)
        return topic_stems(base.query if base else "", sources, texts)

    def measure(self, tenant: str, pending: Pending, resolved: Sequence[Hit], alone: Sequence[Hit],
                embedder: Embedder | None) -> TopicSignals:
        """The cosines `settle` judges a would-be follow-up by (blocking: embeds and reads; offload it).

        Its own hits' closeness comes from their dense signal, or, found by a sparse search without
        one, from embedding their first passages (`embedded_clarity`); likewise the resolved query's.
        With the relative check, the previous turn's first hits are read (tenant boundary) and embedded.
        """
        resolution = pending.resolution
        if not resolution.check_alone:
            return TopicSignals(None, None, None)
        # A turn without a cue is judged by the cross-encoder's margin; the cosines only when its own first
        # hit is a previous source and `standalone_shared` leaves it to them (followup.judge_standalone).
        cosines = resolution.cue is not Cue.NONE or (
            self._rules.standalone_shared == "judge" and self._shared(alone, pending.previous_hits))
        wanted = (self._rules.clear_cosine > 0 or self._rules.relative) and cosines
        own, own_from = clarity(alone) if cosines else None, "dense signal"
        if own is None and wanted and embedder is not None and alone:
            own, own_from = embedded_clarity(embedder, resolution.query, alone, tenant), \
                f"embedded (first {CLARITY_PASSAGES} own hits)"
        if not self._rules.relative or embedder is None:
            return TopicSignals(own, None, None, own_from)
        passages = self._passages(tenant, pending.previous_hits)
        on_resolved = previous = None
        if self._rules.cosines and cosines:
            on_resolved = clarity(resolved)
            if on_resolved is None and resolved:
                on_resolved = embedded_clarity(embedder, resolution.searched, resolved, tenant)
            previous = closeness(embedder, resolution.query, passages, tenant)
        absent = absent_words(resolution.query, pending.previous_query, passages) \
            if self._rules.absent_short and resolution.cue is Cue.SHORT else None
        signals = TopicSignals(own, on_resolved, previous, own_from, absent=absent,
                               previous_states=states_situation(pending.previous_query))
        signals = self._relevance(signals, resolution, pending.previous_hits, passages, resolved, alone)
        return self._first_hits(signals, pending, resolved, alone)

    def _relevance(self, signals: TopicSignals, resolution: Resolution, previous_hits: Sequence[str],
                   passages: Sequence[str], resolved: Sequence[Hit], alone: Sequence[Hit]) -> TopicSignals:
        """`signals` with the cross-encoder's best logits (`Rules.relevance`), each over the first
        `relevance_passages` hits of its set: not scored when the own words' first hit is from a source of
        the previous turn's first hits and `relevance_unshared` leaves the margin unread then."""
        rules = self._rules
        if not rules.relevance or not alone:
            return signals
        shared = self._shared(alone, previous_hits)
        signals = replace(signals, shared=shared)
        if shared and rules.relevance_unshared and not (rules.union and rules.union_shared):
            return signals
        from gateway.retrieval.stages.cross_encoder import shared_model
        n = rules.relevance_passages
        model = shared_model(self._model_source)
        # `passages`: the previous turn's first hits in order, a chunk deleted since left out.
        own_logits, previous_logits = logits(model, resolution.query, [passage_text(h) for h in alone[:n]],
                                             passages[:n])
        own, previous = (max(v) if v else None for v in (own_logits, previous_logits))
        on_resolved = relevance(model, resolution.searched, [passage_text(h) for h in resolved[:n]])[0] \
            if rules.relevance_closeness is not None else None
        union = None
        if rules.union:
            # Each turn's hits in a call of their own, as the own words' (followup.relevance).
            scored = [v for v in relevance(model, resolution.searched, [passage_text(h) for h in alone[:n]],
                                           passages[:n]) if v is not None]
            union = max(scored) if scored else None
        return replace(signals, own_relevance=own, previous_relevance=previous, resolved_relevance=on_resolved,
                       union_resolved=union, own_first=own_logits[0] if own_logits else None)

    def _first_hits(self, signals: TopicSignals, pending: Pending, resolved: Sequence[Hit],
                    alone: Sequence[Hit]) -> TopicSignals:
        """`signals` with the cross-encoder's logits of the own words over each ranking's first hit
        (`Rules.first_hit_margin`, `shared_first_margin`), read only for a turn the rules find unsure
        (`followup.leans_own`, `leans_resolved`)."""
        rules = self._rules
        if (rules.first_hit_margin is None and rules.shared_first_margin is None) or not alone or not resolved or \
                self._judge(signals, pending.resolution, resolved, alone)[0] is not Topic.UNSURE:
            return signals
        from gateway.retrieval.stages.cross_encoder import shared_model
        n = rules.relevance_passages
        model = shared_model(self._model_source)
        query = pending.resolution.query
        own = signals.own_first
        if own is None:  # not read for the margin (its own first hit is a previous source)
            own_logits = logits(model, query, [passage_text(h) for h in alone[:n]])[0]
            own = own_logits[0] if own_logits else None
        on_resolved = logits(model, query, [passage_text(h) for h in resolved[:n]])[0]
        return replace(signals, own_first=own, own_on_resolved_first=on_resolved[0] if on_resolved else None)

    def _shared(self, alone: Sequence[Hit], previous_hits: Sequence[str]) -> bool:
        """Whether the own words' first hit is from a source of the previous turn's first
        `relevance_passages` hits (`Rules.relevance_unshared`)."""
        sources = {hit.rsplit("/", 1)[0] for hit in previous_hits[:self._rules.relevance_passages]}
        return bool(alone) and alone[0].qualified_id.rsplit("/", 1)[0] in sources

    def _passages(self, tenant: str, hits: Sequence[str]) -> list[str]:
        """Title and text of the given chunks (qualified ids), in order; a chunk deleted since is left out."""
        wanted: dict[tuple[str, str, str], list[str]] = {}
        for qualified in hits:
            namespace, collection, rest = qualified.split("/", 2)
            source_id, chunk_id = rest.rsplit("/", 1)
            wanted.setdefault((namespace, collection, source_id), []).append(chunk_id)
        found: dict[str, str] = {}
        for (namespace, collection, source_id), chunk_ids in wanted.items():
            scope = Scope(tenant, namespace, collection)
            if not self._store.exists(scope):
                continue
            for chunk in self._store.source_chunks(scope, source_id, chunk_ids=chunk_ids):
                found[f"{namespace}/{collection}/{source_id}/{chunk.chunk_id}"] = \
                    f"{chunk.title}\n{chunk.text}" if chunk.title else chunk.text
        return [found[h] for h in hits if h in found]

    def _judge(self, signals: TopicSignals, resolution: Resolution, resolved: Sequence[Hit],
               alone: Sequence[Hit]) -> tuple[Topic, str | None, str | None, bool | None]:
        """What the rules make of a turn searched both ways: the topic, why it is a new topic (None if it is
        not), the relative check's reason and the agreement test's answer (None: not run)."""
        reason = clear_topic(signals.own, self._rules.clear_cosine)
        if reason is None and (self._rules.check_short or resolution.reason.startswith("anaphoric")):
            reason = own_topic([h.qualified_id.rsplit("/", 1)[0] for h in alone],
                               [h.qualified_id.rsplit("/", 1)[0] for h in resolved],
                               resolution.boost_sources, self._rules.agree_chunks)
        topic, judged = (Topic.NEW, None) if reason is not None else (Topic.FOLLOW_UP, None)
        agree = None
        if reason is None and self._rules.relative:
            if self._rules.agree_sources:
                agree = agrees([h.qualified_id.rsplit("/", 1)[0] for h in alone],
                               [h.qualified_id.rsplit("/", 1)[0] for h in resolved],
                               resolution.boost_sources, self._rules.agree_sources)
            topic, judged = judge_turn(signals, self._rules, resolution.cue, agree)
            if topic is Topic.NEW:
                reason = judged
        return topic, reason, judged, agree

    def settle(self, pending: Pending, resolved: Sequence[Hit], alone: Sequence[Hit],
               recorder: TraceRecorder, signals: TopicSignals | None = None) -> tuple[Pending, list[Hit] | None]:
        """After a follow-up was searched both resolved and by its own words: is it a new topic?

        Returns the turn and the hits to keep instead of the resolved ones, or None to keep the
        resolved hits. A new topic (`clear_topic`, `own_topic`, `judge_topic`) stands alone and keeps
        its own hits; an unsure one (`judge_topic`) stays a follow-up searched alongside its own words,
        whose two rankings the caller fuses (`Resolution.alongside`). `signals`: from `measure`.
        """
        resolution = pending.resolution
        if not resolution.check_alone:
            return pending, None
        signals = signals if signals is not None else TopicSignals(clarity(alone), None, None)
        with recorder.stage("topicCheck", Phase.HITS, input_count=len(resolved) + len(alone)) as stage:
            cosine = signals.own
            topic, reason, judged, agree = self._judge(signals, resolution, resolved, alone)
            settled = settle(topic, signals, self._rules, resolution.cue)
            topic, weight = settled.topic, settled.weight
            if settled.hedge:
                judged, reason = f"{topic.value}: {settled.hedge}; {judged}", None
            if settled.lean:
                judged = f"{judged}; {settled.lean}"
            if settled.resolved:
                judged = f"{settled.resolved}; {judged}"
            stage.detail.update({"newTopic": topic is Topic.NEW, "topic": topic.value, "reason": reason or judged,
                                 "ownTopHit": alone[0].qualified_id if alone else None,
                                 "ownCosine": _rounded(cosine),
                                 "cosineFrom": None if cosine is None else signals.own_from,
                                 "resolvedCosine": _rounded(signals.resolved),
                                 "previousCosine": _rounded(signals.previous),
                                 "clearCosine": self._rules.clear_cosine,
                                 "relativeClarity": self._rules.relative_clarity,
                                 "previousMargin": self._rules.previous_margin,
                                 "agreeChunks": self._rules.agree_chunks,
                                 "agreeSources": self._rules.agree_sources, "agrees": agree,
                                 **_relevance_detail(signals, self._rules), "cue": resolution.cue.value,
                                 "unsureWeight": weight if self._rules.unsure else None,
                                 "firstHitMargin": None if signals.own_first is None or
                                 signals.own_on_resolved_first is None else
                                 round(signals.own_first - signals.own_on_resolved_first, 4),
                                 "firstHitThreshold": self._rules.first_hit_margin,
                                 "ownFirstRelevance": _rounded(signals.own_first),
                                 "sharedFirstThreshold": self._rules.shared_first_margin,
                                 "sharedFirstLogit": self._rules.shared_first_logit})
            if topic is Topic.UNSURE:
                stage.hits(list(resolved))
                return replace(pending, resolution=replace(resolution, alongside=resolution.query,
                                                           searched_weight=weight)), None
            kept = list(alone if topic is Topic.NEW else resolved)
            stage.hits(kept)
        if topic is not Topic.NEW:
            return pending, None
        return replace(pending, resolution=with_own_topic(resolution, reason or "")), kept

    async def finish(self, tenant: str, pending: Pending, hits: Sequence[Hit],
                     recorder: TraceRecorder) -> list[Hit]:
        config = self._registry.get(tenant).conversations
        resolution = pending.resolution
        with recorder.stage("conversation", Phase.HITS, input_count=len(hits)) as stage:
            out, boosted = list(hits), []
            if resolution.resolved and resolution.boost_sources:
                out, boosted = boost(hits, resolution.boost_sources, config.boost)
            turn = await offload(functools.partial(
                self._turns.append, tenant, pending.stored_id, resolution.query, resolution.searched,
                resolution.from_turn, [h.qualified_id for h in out[:config.max_hits]], number=pending.number,
                ttl_ms=int(config.ttl_hours * 3_600_000), max_turns=config.max_turns))
            stage.detail.update({"conversationId": pending.conversation_id, "turn": turn.turn,
                                 "boost": config.boost if boosted else 0.0, "boosted": boosted,
                                 "boostFromTurn": resolution.boost_turn or None})
            stage.hits(out)
        return out

    async def read(self, tenant: str, conversation_id: str, last: int | None, *,
                   user_id: str | None = None) -> list[Turn]:
        check_conversation_id(conversation_id)
        config = self._registry.get(tenant).conversations
        wanted = config.max_turns if last is None else last
        if not 1 <= wanted <= config.max_turns:
            raise InvalidInput(f"last {wanted} is out of range; allowed: 1 to {config.max_turns} "
                               f"(conversations.max_turns of tenant {tenant!r})")
        return await offload(self._turns.recent, tenant, stored_conversation_id(conversation_id, user_id), wanted,
                             config.max_turns)

    async def clear(self, tenant: str, conversation_id: str, *, user_id: str | None = None) -> int:
        check_conversation_id(conversation_id)
        return await offload(self._turns.clear, tenant, stored_conversation_id(conversation_id, user_id))


def _relevance_detail(signals: TopicSignals, rules: Rules) -> dict[str, object]:
    """The cross-encoder's part of the `topicCheck` stage (empty when its tests are off)."""
    if not rules.relevance:
        return {}
    own, previous = signals.own_relevance, signals.previous_relevance
    return {"ownRelevance": _rounded(own), "previousRelevance": _rounded(previous),
            "relevanceMargin": None if own is None or previous is None else round(own - previous, 4),
            "resolvedRelevance": _rounded(signals.resolved_relevance), "sharedTopSource": signals.shared,
            "relevanceThreshold": rules.relevance_margin, "relevanceRole": rules.relevance_role,
            "standaloneThreshold": rules.standalone_margin}


def _rounded(cosine: float | None) -> float | None:
    return None if cosine is None else round(cosine, 4)


def _detail(conversation_id: str, resolution: Resolution, turns: Sequence[Turn]) -> dict[str, object]:
    return {"conversationId": conversation_id, "method": resolution.method.value, "reason": resolution.reason,
            "resolved": resolution.resolved, "query": resolution.query, "searched": resolution.searched,
            "fromTurn": resolution.from_turn or None, "boostFromTurn": resolution.boost_turn or None,
            "boostSources": list(resolution.boost_sources), "alongside": resolution.alongside,
            "turnsRead": len(turns)}
