"""The conversation service with a language-model rewrite, on the loopback OpenAI-compatible endpoint."""

import asyncio
import json
from dataclasses import replace

import pytest

from gateway.conversations.followup import Rules
from gateway.conversations.service import Conversations
from gateway.errors import InvalidInput
from gateway.retrieval.trace import TraceRecorder
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.registry import TenantRegistry
from tests.loopback import loopback_server


def _registry(base_url: str) -> TenantRegistry:
    tenant = TenantConfig(id="llmco", namespaces={"support": {"collections": {"docs": {"trust_tier": "first-party"}}}},
                          llm={"base_url": base_url, "model": "rewriter", "timeout_ms": 5000},
                          conversations={"resolve": "llm"})
    return TenantRegistry({"llmco": tenant})


def _answer(content: str) -> tuple[int, dict]:
    return 200, {"choices": [{"message": {"content": content}}]}


def _turn(conversations: Conversations, cid: str, query: str):
    recorder = TraceRecorder()

    async def run():
        pending = await conversations.begin("llmco", cid, query, recorder)
        await conversations.finish("llmco", pending, [], recorder)
        return pending

    pending = asyncio.run(run())
    return pending.resolution, recorder.finish().stages[0]


def test_the_language_model_rewrites_a_follow_up_and_the_trace_says_so(lite_store):
    replies = iter([_answer(json.dumps({"query": "Acme refund processing time", "followUp": True}))])
    with loopback_server(lambda path, body: next(replies)) as (url, seen):
        conversations = Conversations(_registry(url), lite_store, {})
        first, _ = _turn(conversations, "llm-1", "How do refunds work?")
        assert first.searched == "How do refunds work?" and not seen  # no history: no model call
        second, stage = _turn(conversations, "llm-1", "how long does it take?")
    assert second.searched == "Acme refund processing time" and second.from_turn == 1
    assert stage.detail["method"] == "llm" and stage.detail["fromTurn"] == 1 and not stage.warnings
    prompt = seen[0]["body"]["messages"][1]["content"]
    assert "1. How do refunds work?" in prompt and prompt.endswith("Last message: how long does it take?")


def test_a_failing_language_model_falls_back_to_the_rules_with_a_warning(lite_store):
    replies = iter([(500, {"error": "down"}), _answer("not json")])
    with loopback_server(lambda path, body: next(replies)) as (url, _):
        conversations = Conversations(_registry(url), lite_store, {})
        _turn(conversations, "llm-2", "How do refunds work?")
        resolution, stage = _turn(conversations, "llm-2", "how long does it take?")
        assert resolution.method.value == "rules" and resolution.searched.startswith("How do refunds work?")
        assert "answered HTTP 500" in stage.warnings[0]
        _, stage = _turn(conversations, "llm-2", "and who approves it?")
        assert "malformed JSON" in stage.warnings[0]


def test_resolve_llm_without_an_llm_section_is_a_config_error():
    with pytest.raises(ValueError, match="conversations.resolve: llm needs a language model"):
        TenantConfig(id="x", namespaces={"n": {"collections": {"c": {"trust_tier": "first-party"}}}},
                     conversations={"resolve": "llm"})


def test_reading_more_turns_than_are_kept_is_refused(lite_store):
    conversations = Conversations(_registry("http://127.0.0.1:9"), lite_store, {})
    with pytest.raises(InvalidInput, match="last 21 is out of range; allowed: 1 to 20"):
        asyncio.run(conversations.read("llmco", "c", 21))


def test_the_issue_example_is_recorded_as_a_new_question_not_a_follow_up_by_the_word_check(lite_store):
    # The word check is an option (`Rules.min_overlap`); the shipped rules judge such a turn by its hits.
    tenant = TenantConfig(id="rulesco", namespaces={"support": {"collections": {"docs": {"trust_tier": "first-party"}}}})
    conversations = Conversations(TenantRegistry({"rulesco": tenant}), lite_store, {},
                                  rules=Rules(min_overlap=0.34, shift_words=4))

    async def turn(query: str):
        recorder = TraceRecorder()
        pending = await conversations.begin("rulesco", "issue-31", query, recorder)
        await conversations.finish("rulesco", pending, [], recorder)
        return recorder.finish().stages[0].detail

    asyncio.run(turn("How do refunds work for a Team subscription?"))
    detail = asyncio.run(turn("Is there nightly backup of every volume?"))
    assert detail["resolved"] is False and detail["reason"] == "new topic: 0 of 4 content words in the previous topic"
    assert detail["searched"] == "Is there nightly backup of every volume?" and detail["boostSources"] == []
    assert asyncio.run(turn("how long does it take?"))["fromTurn"] == 2  # an anaphor still leans back


def test_the_topic_of_a_short_follow_up_reads_a_bounded_number_of_chunks_and_is_costed(lite_store, embedder):
    from gateway.conversations.followup import CLARITY_PASSAGES
    from gateway.admission.cost import CROSS_ENCODER_PER_HIT_256
    from gateway.conversations.service import (CLARITY_EMBEDDING, RELATIVE_EMBEDDINGS, TOPIC_CHUNKS, TURN_WRITE,
                                               relevance_cost, turn_cost)
    from gateway.conversations.turns import Turn
    from gateway.storage.milvus import ChunkRecord
    from gateway.storage.schema import Scope
    from gateway.tenancy.config import ConversationConfig

    tenant = TenantConfig(id="topicco", namespaces={"support": {"collections": {"docs": {"trust_tier": "first-party"}}}})
    conversations = Conversations(TenantRegistry({"topicco": tenant}), lite_store, {}, rules=Rules(min_overlap=0.34))
    scope = Scope("topicco", "support", "docs")
    lite_store.ensure(scope)
    texts = [f"Refund rule {i}: refunds reach the card in {i + 1} days." for i in range(TOPIC_CHUNKS + 8)]
    lite_store.upsert_chunks(scope, [
        ChunkRecord(source_id="refunds.md", chunk_id=str(i), parent_key="refunds.md#p0", text=text, title="Refunds",
                    content_hash=f"r-{i}", created_at=1, updated_at=1, dense=vector, metadata={}, index_text=text)
        for i, (text, vector) in enumerate(zip(texts, embedder.embed_documents(texts)))])
    reads = []
    real = lite_store.source_chunks
    lite_store.source_chunks = lambda scope, source_id, limit=None: reads.append(
        len(chunks := real(scope, source_id, limit))) or chunks
    try:
        turn = Turn(conversation_id="c", turn=1, query="how do refunds work", resolved_query="how do refunds work",
                    hits=("support/docs/refunds.md/0",), created_at=1, expires_at=2)
        topic = conversations._topic("topicco", [turn], 1)
    finally:
        del lite_store.source_chunks
    assert reads == [TOPIC_CHUNKS] and "card" in " ".join(topic)  # a source of 40 chunks: 32 read
    rules = ConversationConfig()
    off = {"relative_clarity": 0.0, "previous_margin": 0.0, "relevance_margin": None}
    # The relative topic check (on in the shipped rules) embeds up to three sets of first hits (the
    # previous turn's, and for a sparse search its own and the resolved query's) and reads the previous
    # turn's first hits: charged at that worst case. The fixed cosine alone embeds one set at most.
    relative = RELATIVE_EMBEDDINGS * CLARITY_EMBEDDING + CLARITY_PASSAGES
    # The cross-encoder's margin (on in the shipped rules) scores its own words against its own first 3
    # hits and the previous turn's, and an unsure turn's against the resolved query's first 3
    # (Rules.first_hit_margin, shared_first_margin): nine pairs at 256 tokens, each charged as a reranked hit.
    assert relevance_cost(Rules()) == 9 * CROSS_ENCODER_PER_HIT_256
    assert relevance_cost(Rules(first_hit_margin=None)) == 9 * CROSS_ENCODER_PER_HIT_256
    assert relevance_cost(Rules(first_hit_margin=None, shared_first_margin=None)) == 6 * CROSS_ENCODER_PER_HIT_256
    assert relevance_cost(Rules(relevance_closeness=0.0)) == 12 * CROSS_ENCODER_PER_HIT_256
    assert relevance_cost(Rules(relevance_margin=None)) == 0
    relative += relevance_cost(Rules())
    # The topic is read only for the word check (Rules.min_overlap, off in the shipped rules).
    assert turn_cost(rules, rules=Rules(min_overlap=0.34)) == (4 * rules.max_turns + TOPIC_CHUNKS + TURN_WRITE
                                                                + relative)
    assert turn_cost(rules, rules=Rules(min_overlap=0.34, clear_cosine=0.0, **off)) == (
        4 * rules.max_turns + TOPIC_CHUNKS + TURN_WRITE)
    assert turn_cost(rules) == 4 * rules.max_turns + TURN_WRITE + relative
    assert turn_cost(rules, rules=Rules(clear_cosine=0.325, **off)) == 4 * rules.max_turns + TURN_WRITE + CLARITY_EMBEDDING
    assert turn_cost(ConversationConfig(resolve="off")) == 4 * rules.max_turns + TURN_WRITE
    # A follow-up's own words are searched too (Rules.relative, clear_cosine, agree_chunks): one more search
    # of the request's cost.
    assert turn_cost(rules, 111) == 4 * rules.max_turns + TURN_WRITE + 111 + relative
    assert turn_cost(rules, 111, Rules(agree_chunks=4, **off)) == 4 * rules.max_turns + TURN_WRITE + 111
    assert turn_cost(rules, 111, Rules(agree_chunks=0, **off)) == 4 * rules.max_turns + TURN_WRITE
    assert turn_cost(ConversationConfig(resolve="off"), 111) == 4 * rules.max_turns + TURN_WRITE


# Issue 31's scratch corpus: a refunds question, then a question about backups.
ISSUE_DOCS = {
    "refunds.md": "Refunds for a Team subscription: an owner can request a refund within 14 days of the purchase. "
                  "The money goes back to the original card within 5 to 10 business days.",
    "team-plan.md": "The Team subscription adds seats, shared buckets and invoices per workspace. Subscriptions "
                    "renew monthly or yearly.",
    "billing.md": "Invoices are issued on the first day of each month. A failed payment is retried three times.",
    "backups.md": "Nightly backup: every volume is snapshotted at 02:00 UTC and snapshots are kept for 30 days. "
                  "Restore a volume from any snapshot in the console.",
    "sso.md": "Single sign-on with SAML or OIDC is available on the Enterprise plan.",
    "regions.md": "Buckets live in eu-west-1, us-east-1 or ap-southeast-1; data never leaves its region.",
    "api-keys.md": "API keys are created under Settings and can be rotated or revoked at any time.",
    "webhooks.md": "Webhooks deliver object events to your endpoint and retry failed deliveries for 24 hours.",
}


def _issue_searcher(lite_store, embedder, rules, boost: float = 0.0):
    from gateway.ingest.loaders import Document
    from gateway.ingest.sync import ingest_documents
    from gateway.routing.searcher import Searcher
    from gateway.settings import Settings

    tenant = TenantConfig(id="shiftco", namespaces={"support": {"collections": {"docs": {"trust_tier": "first-party"}}}},
                          conversations={"boost": boost})
    registry = TenantRegistry({"shiftco": tenant})
    ref = registry.collections("shiftco")[0]
    if not lite_store.exists(ref.scope):
        ingest_documents(lite_store, embedder, ref, [Document(source, text, title=source)
                                                     for source, text in ISSUE_DOCS.items()], progress=False)
    return Searcher(registry, lite_store, embedder, Settings(), environ={}, conversation_rules=rules)


def _conversation(searcher, cid: str, *queries: str):
    from gateway.routing.searcher import SearchRequest
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role

    async def run():
        results = []
        for query in queries:
            results.append(await searcher.search(Principal("shiftco", Role.READER), SearchRequest(
                query=query, collection="docs", conversation_id=cid), TraceRecorder()))
        return results

    return asyncio.run(run())


def test_a_topic_shift_read_as_a_follow_up_keeps_its_own_top_hit(lite_store, embedder):
    # Issue 31: "Is there nightly backup of every volume?" after a refunds question was read as a
    # follow-up (anaphoric word 'there'), searched glued to the refunds question with the refunds
    # sources boosted, and backups.md fell from rank 1. With the word rules that misread it, the
    # own-topic check still keeps the turn's own hits: its own top hit (backups.md) is not a refunds
    # source, and the glued query ranks backups.md within its first `agree_chunks` hits too.
    misreading = Rules(existential_there=False, numeral_one=False, empty_it=False, antecedent_words=0,
                       min_overlap=0.0, shift_words=0, clear_cosine=0.0, relative_clarity=0.0, previous_margin=0.0)
    first, shift = "How do refunds work for a Team subscription?", "Is there nightly backup of every volume?"
    alone = _conversation(_issue_searcher(lite_store, embedder, misreading), "alone", shift)[0]
    assert alone.hits[0].source_id == "backups.md"
    unchecked = _conversation(_issue_searcher(lite_store, embedder, replace(misreading, agree_chunks=0), boost=0.5),
                              "unchecked", first, shift)[1]
    assert unchecked.hits[0].source_id != "backups.md"  # the damage the issue reports (with the boost then shipped)

    searcher = _issue_searcher(lite_store, embedder, replace(misreading, agree_chunks=4))
    _, checked, follow_up = _conversation(searcher, "checked", first, shift, "how long are they kept?")
    assert [h.id for h in checked.hits] == [h.id for h in alone.hits]
    stages = {s.name: s.detail for s in checked.trace.stages}
    assert stages["followUp"]["reason"] == "anaphoric word 'there'"  # read as a follow-up by the words...
    assert stages["topicCheck"]["newTopic"] is True                   # ...and kept apart by the searches
    assert stages["topicCheck"]["reason"].startswith("new topic: its own top hit (backups.md) is not from the previous")
    assert stages["conversation"]["boosted"] == []
    # The shift is recorded as a turn that stands alone, so the next follow-up leans on it.
    turns = asyncio.run(searcher.conversations.read("shiftco", "checked", None))
    assert (turns[1].resolved_query, turns[1].resolved_from) == (shift, 0)
    followed = {s.name: s.detail for s in follow_up.trace.stages}
    assert followed["followUp"]["searched"] == f"{shift} how long are they kept?"
    assert followed["topicCheck"]["newTopic"] is False and follow_up.hits[0].source_id == "backups.md"



def _demo_searcher(lite_store, embedder, tenant: str, collection: str, rules: Rules, tenants_dir: str = "tenants",
                   **conversations):
    """A searcher over one collection of a demo tenant, as seeded (tenants/<tenant>.yaml; `tenants_dir`
    relative to the repository: an evaluation-only tenant's directory), its `conversations:` keys
    overridden by `conversations`."""
    from pathlib import Path

    from gateway.ingest.loaders import load_paths
    from gateway.ingest.seed import seed_paths
    from gateway.ingest.sync import ingest_documents
    from gateway.routing.searcher import Searcher
    from gateway.settings import Settings
    from gateway.tenancy.loader import load_tenants

    tenants = Path(__file__).parents[2] / tenants_dir
    config = load_tenants(tenants)[tenant]
    if conversations:
        config = config.model_copy(update={"conversations": config.conversations.model_copy(update=conversations)})
    registry = TenantRegistry({tenant: config})
    ref = registry.resolve(tenant, collection)
    if not lite_store.exists(ref.scope):
        corpus = next(c for c in registry.get(tenant).seed if c.collection == collection)
        ingest_documents(lite_store, embedder, ref, load_paths(seed_paths(tenants, corpus)), progress=False)
    return Searcher(registry, lite_store, embedder, Settings(), environ={}, conversation_rules=rules)


def _turns(searcher, tenant: str, collection: str, cid: str | None, *queries: str, limit: int | None = None):
    from gateway.routing.searcher import SearchRequest
    from gateway.tenancy.auth import Principal
    from gateway.tenancy.config import Role

    async def run():
        return [await searcher.search(Principal(tenant, Role.READER), SearchRequest(
            query=query, collection=collection, conversation_id=cid, limit=limit), TraceRecorder()) for query in queries]

    return asyncio.run(run())


# The rules shipped before the clarity check (chosen on the word family), for the regressions below.
WORD_RULES = Rules(numeral_one=True, antecedent_words=2, min_overlap=0.34, shift_words=4, agree_chunks=4,
                   clear_cosine=0.0, relative_clarity=0.0, previous_margin=0.0)
# The fixed cosine shipped before the relative check.
CLEAR_RULES = Rules(clear_cosine=0.325, relative_clarity=0.0, previous_margin=0.0)
# The rules shipped before the unsure turn's fusion leaned on the resolved ranking (plain RRF).
EVEN_FUSION = Rules(unsure_weight=1.0, relevance_margin=None)
# The rules shipped before the cross-encoder's margin: the two cosine tests alone, an unsure turn fused at 1.3.
# The unsure band's tests below use them: with the margin, these follow-ups are no longer unsure (resolved).
COSINE_RULES = Rules(relevance_margin=None)


def test_a_shift_whose_own_top_hit_the_glued_query_ranks_low_keeps_its_own_hits(lite_store, embedder):
    # Held-out globex case g-s13: "it" reads as anaphoric, and the glued query ranks the shift's own
    # top hit 5th, past the own-topic check's 4: the word rules searched it glued to the tracking
    # question. Its own words find a close match, so the clarity check keeps its own hits.
    first, shift = "How do I track a freight shipment?", "It is snowing hard here; will my shipment be delayed by the weather?"
    searcher = _demo_searcher(lite_store, embedder, "globex", "docs", CLEAR_RULES)
    alone = _turns(searcher, "globex", "docs", None, shift)[0]
    before = _turns(_demo_searcher(lite_store, embedder, "globex", "docs", WORD_RULES), "globex", "docs", "snow-before",
                    first, shift)[1]
    assert [h.id for h in before.hits] != [h.id for h in alone.hits]
    after = _turns(searcher, "globex", "docs", "snow-after", first, shift)[1]
    stages = {s.name: s.detail for s in after.trace.stages}
    assert stages["followUp"]["reason"] == "anaphoric word 'it'"
    assert stages["topicCheck"]["newTopic"] is True
    assert stages["topicCheck"]["reason"].startswith("new topic: its own words find a close match (cosine ")
    assert [h.id for h in after.hits] == [h.id for h in alone.hits]
    # The shipped relative check: its words find their hits 0.85x as closely as the glued query finds its
    # own, but the tracking hits are close to it too (0.13 less): unsure, so the two rankings are fused,
    # and the weather article the shift asks for still leads.
    relative = _turns(_demo_searcher(lite_store, embedder, "globex", "docs", Rules()), "globex", "docs", "snow-relative",
                      first, shift)[1]
    check = {s.name: s.detail for s in relative.trace.stages}["topicCheck"]
    assert check["topic"] == "unsure" and check["reason"].startswith("unsure, resolved and own hits fused: ")
    assert relative.hits[0].source_id == alone.hits[0].source_id


def test_a_sparse_collection_judges_a_would_be_follow_up_by_its_own_hits_embedded(lite_store, embedder):
    # Unseen-set case u-s12 (globex tickets, mode: sparse): "there" read as anaphoric, and sparse hits
    # carry no dense cosine, so every would-be follow-up there was searched glued to the API-key
    # question (the late-fee ticket fell from the top). Its own first hits are embedded instead, and
    # their closeness to the question judges it as a dense signal would.
    first, shift = "The API returns GX-401-MISSING-KEY with a valid key", "Why is there a late fee on an invoice we paid on time?"
    searcher = _demo_searcher(lite_store, embedder, "globex", "tickets", Rules())
    alone = _turns(searcher, "globex", "tickets", None, shift)[0]
    after = _turns(searcher, "globex", "tickets", "fee-after", first, shift)[1]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["cosineFrom"].startswith("embedded") and check["newTopic"] is True
    assert check["ownCosine"] >= Rules().relative_clarity * check["resolvedCosine"]
    assert check["ownCosine"] - check["previousCosine"] >= Rules().previous_margin
    assert [h.id for h in after.hits] == [h.id for h in alone.hits]


def test_a_follow_up_in_a_sparse_collection_is_judged_by_the_same_threshold(lite_store, embedder):
    # Unseen-set case u-f06 (globex tickets, mode: sparse): the own-topic rank check took "can we
    # deliver there on Sundays?" for a new topic. Without a dense signal the clarity check embeds its own
    # hits, and the verdict is the threshold's, as for any collection.
    first, follow_up = "Our truck was turned away at Riverside Hub for arriving late", "can we deliver there on Sundays?"
    before = _turns(_demo_searcher(lite_store, embedder, "globex", "tickets", WORD_RULES), "globex", "tickets",
                    "hub-before", first, follow_up)[1]
    assert {s.name: s.detail for s in before.trace.stages}["topicCheck"]["newTopic"] is True
    searcher = _demo_searcher(lite_store, embedder, "globex", "tickets", COSINE_RULES)
    after = _turns(searcher, "globex", "tickets", "hub-after", first, follow_up)[1]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["cosineFrom"].startswith("embedded")
    # Its own words find a Sunday-delivery ticket about as closely as the glued query finds its own
    # (0.63x), but that ticket is also among the previous turn's first hits (no margin): unsure, not a
    # new topic, so the glued ranking is fused in.
    assert check["newTopic"] is False and check["topic"] == "unsure"
    assert check["ownCosine"] - check["previousCosine"] < Rules().previous_margin
    assert check["agreeChunks"] == 0  # the own-topic rank check is off
    # The shipped rules add the cross-encoder: the Riverside Hub tickets answer it about as well as its own
    # hits do (margin under 6.5), so it is a follow-up.
    shipped = _turns(_demo_searcher(lite_store, embedder, "globex", "tickets", Rules()), "globex", "tickets",
                     "hub-relevance", first, follow_up)[1]
    check = {s.name: s.detail for s in shipped.trace.stages}["topicCheck"]
    assert check["topic"] == "follow-up" and check["relevanceMargin"] < Rules().relevance_margin


def test_a_resolved_follow_up_returns_what_its_glued_query_finds(lite_store, embedder):
    # Graded acme case a-f10: resolution scored below plain gluing of the two turns where the previous
    # turn's sources were boosted (conversations.boost 0.5) over what the glued query ranked higher
    # (here from the 6th of 20 hits on). The boost is 0 by default: a follow-up gets exactly the glued
    # query's ranking.
    first, follow_up = "How do webhooks deliver events?", "how are they signed?"
    searcher = _demo_searcher(lite_store, embedder, "acme", "docs", Rules())
    resolved = _turns(searcher, "acme", "docs", "signed", first, follow_up, limit=20)[1]
    glued = _turns(searcher, "acme", "docs", None, f"{first} {follow_up}", limit=20)[0]
    stages = {s.name: s.detail for s in resolved.trace.stages}
    assert stages["followUp"]["reason"] == "anaphoric word 'they'" and stages["topicCheck"]["newTopic"] is False
    assert stages["topicCheck"]["topic"] == "follow-up"  # "how are they signed?" names little
    assert [h.id for h in resolved.hits] == [h.id for h in glued.hits]
    assert stages["conversation"]["boosted"] == []


def test_a_follow_up_whose_own_words_find_a_close_ticket_is_fused_not_kept_alone(lite_store, embedder):
    # Unseen-set case u-f08 (acme tickets): "do we get a credit for that?" after an upload-outage ticket
    # finds a ticket at cosine 0.33 by its own words, above the fixed cosine shipped before (0.325), so
    # it kept its own hits, and the outage ticket the whole question means (ACME-1003) was not first.
    # Relative to the glued query's closeness that is under half: not a subject of its own; its hits are
    # far from the outage hits, so it is unsure, the two rankings are fused and ACME-1003 leads.
    first, follow_up = "Uploads fail with ACME-SVC-503 in eu-west-1", "do we get a credit for that?"
    before = _turns(_demo_searcher(lite_store, embedder, "acme", "tickets", CLEAR_RULES), "acme", "tickets",
                    "credit-before", first, follow_up)[1]
    old = {s.name: s.detail for s in before.trace.stages}["topicCheck"]
    assert old["newTopic"] is True and before.hits[0].source_id != "ACME-1003"
    after = _turns(_demo_searcher(lite_store, embedder, "acme", "tickets", COSINE_RULES), "acme", "tickets",
                   "credit-after", first, follow_up)[1]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["topic"] == "unsure" and check["ownCosine"] < 0.5 * check["resolvedCosine"]
    assert after.hits[0].source_id == "ACME-1003"
    assert {s.name: s.detail for s in after.trace.stages}["conversation"]["turn"] == 2
    # The shipped rules: the outage tickets answer it nearly as well as its own hits (cross-encoder margin
    # about 4.7, under 6.5): a follow-up with the glued query's hits, the outage ticket still first.
    searcher = _demo_searcher(lite_store, embedder, "acme", "tickets", Rules())
    shipped = _turns(searcher, "acme", "tickets", "credit-relevance", first, follow_up)[1]
    glued = _turns(searcher, "acme", "tickets", None, f"{first} {follow_up}")[0]
    assert {s.name: s.detail for s in shipped.trace.stages}["topicCheck"]["topic"] == "follow-up"
    assert [h.id for h in shipped.hits] == [h.id for h in glued.hits] and shipped.hits[0].source_id == "ACME-1003"


def test_a_shift_close_to_the_previous_topic_is_fused_not_glued(lite_store, embedder):
    # Fresh-set case c-s08 (cycla): "What is this 20 EUR hold on my card?" after a question on the
    # Monthly pass's price finds its hit at cosine 0.31 by its own words, below the fixed 0.325
    # shipped before, so it was searched glued and payments-and-refunds.md fell from the top. Its
    # words find their hit 0.56x as closely as the glued query finds its own, so it is unsure: the
    # rankings are fused and the page it asks for leads again.
    first, shift = "What does the Monthly pass cost?", "What is this 20 EUR hold on my card?"
    fresh = "tests/data/fresh_tenants"
    alone = _turns(_demo_searcher(lite_store, embedder, "cycla", "help", Rules(), fresh), "cycla", "help", None,
                   shift)[0]
    assert alone.hits[0].source_id == "payments-and-refunds.md"
    before = _turns(_demo_searcher(lite_store, embedder, "cycla", "help", CLEAR_RULES, fresh), "cycla", "help",
                    "hold-before", first, shift)[1]
    assert {s.name: s.detail for s in before.trace.stages}["topicCheck"]["newTopic"] is False
    assert before.hits[0].source_id != "payments-and-refunds.md"
    after = _turns(_demo_searcher(lite_store, embedder, "cycla", "help", Rules(), fresh), "cycla", "help",
                   "hold-after", first, shift)[1]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["topic"] == "unsure"
    assert after.hits[0].source_id == "payments-and-refunds.md"
    # Its own first hit is one of the previous turn's sources: the cross-encoder's margin (near 0 for a
    # follow-up and for a shift this close alike) is not read, and the cosine tests decide.
    assert check["sharedTopSource"] is True and check["ownRelevance"] is None and check["relevanceMargin"] is None


def test_an_unsure_follow_up_keeps_the_resolved_ranking_ahead_of_its_own_words(lite_store, embedder):
    # Unseen-set case u-f06 (globex tickets, mode: sparse): "can we deliver there on Sundays?" after a
    # ticket about a truck turned away at Riverside Hub is unsure (its own words find a Sunday-delivery
    # ticket closely, but one the previous turn found too). Fused with equal weights, that ticket
    # (GLX-2004) led and the Riverside Hub ticket the question means (GLX-2012) came second, below the
    # glued query's ranking. The resolved ranking now weighs 1.3: its hits keep their order ahead of
    # hits only the own words found, so the turn returns what gluing returns.
    first, follow_up = "Our truck was turned away at Riverside Hub for arriving late", "can we deliver there on Sundays?"
    before = _turns(_demo_searcher(lite_store, embedder, "globex", "tickets", EVEN_FUSION), "globex", "tickets",
                    "sunday-even", first, follow_up)[1]
    assert {s.name: s.detail for s in before.trace.stages}["topicCheck"]["topic"] == "unsure"
    assert before.hits[0].source_id == "GLX-2004"
    searcher = _demo_searcher(lite_store, embedder, "globex", "tickets", COSINE_RULES)
    after = _turns(searcher, "globex", "tickets", "sunday-leaning", first, follow_up)[1]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["topic"] == "unsure" and check["unsureWeight"] == 1.3
    glued = _turns(searcher, "globex", "tickets", None, f"{first} {follow_up}")[0]
    assert [h.source_id for h in after.hits] == [h.source_id for h in glued.hits]
    assert after.hits[0].source_id == "GLX-2012"
    # The own words' ranking still counts: the fused hits carry both queries.
    assert after.hits[0].provenance.matched_queries == (f"{first} {follow_up}", follow_up)


def test_an_unsure_pronoun_follow_up_finds_what_the_whole_question_means(lite_store, embedder):
    # Fresh-set case c-f11 (cycla): "what happens to my account if I do it anyway?" after a question on
    # riding after drinking is unsure (its own words name an account); fused with equal weights, the
    # account page led and the riding-rules page the whole question means was second.
    first, follow_up = "What are the rules about riding after drinking alcohol?", "what happens to my account if I do it anyway?"
    fresh = "tests/data/fresh_tenants"
    before = _turns(_demo_searcher(lite_store, embedder, "cycla", "help", EVEN_FUSION, fresh), "cycla", "help",
                    "alcohol-even", first, follow_up)[1]
    assert before.hits[0].source_id == "account-and-app.md"
    after = _turns(_demo_searcher(lite_store, embedder, "cycla", "help", COSINE_RULES, fresh), "cycla", "help",
                   "alcohol-leaning", first, follow_up)[1]
    assert {s.name: s.detail for s in after.trace.stages}["topicCheck"]["topic"] == "unsure"
    assert after.hits[0].source_id == "riding-rules.md"
    # The shipped rules: the riding-rules hits answer it as well as its own (cross-encoder margin under 6.5),
    # a follow-up searched glued, riding-rules.md first.
    shipped = _turns(_demo_searcher(lite_store, embedder, "cycla", "help", Rules(), fresh), "cycla", "help",
                     "alcohol-relevance", first, follow_up)[1]
    assert {s.name: s.detail for s in shipped.trace.stages}["topicCheck"]["topic"] == "follow-up"
    assert shipped.hits[0].source_id == "riding-rules.md"


def _cross_encoder_case(lite_store, embedder, tenant: str, collection: str, tenants_dir: str, first: str,
                        follow_up: str):
    """The follow-up resolved with the rules before the cross-encoder and with the shipped ones, and the
    glued query's hits (what a resolved follow-up gets)."""
    old = _turns(_demo_searcher(lite_store, embedder, tenant, collection, COSINE_RULES, tenants_dir), tenant,
                 collection, f"{tenant}-cosine", first, follow_up)[1]
    searcher = _demo_searcher(lite_store, embedder, tenant, collection, Rules(), tenants_dir)
    new = _turns(searcher, tenant, collection, f"{tenant}-relevance", first, follow_up)[1]
    glued = _turns(searcher, tenant, collection, None, f"{first} {follow_up}")[0]
    return old, new, glued


def test_a_follow_up_naming_a_subject_of_its_own_is_resolved_when_the_previous_hits_answer_it(lite_store, embedder):
    # Graded acme case a-f17: "Is there a limit on how many of them I can register?" after a question on
    # setting up webhook endpoints. Its own words find rate-limits.md at 0.61x the glued query's closeness,
    # 0.208 closer than the webhooks hits: both cosine tests passed, a new topic, and webhooks.md (the
    # page the whole question means) was not returned first (nDCG 0.36 against 1.00 glued). The
    # cross-encoder finds its own hits answer it only ~2.3 logits better than the webhooks hits (< 6.5):
    # a follow-up, and it gets the glued query's hits.
    old, new, glued = _cross_encoder_case(lite_store, embedder, "acme", "docs", "tenants",
                                          "How do I set up webhook endpoints?",
                                          "Is there a limit on how many of them I can register?")
    before = {s.name: s.detail for s in old.trace.stages}["topicCheck"]
    assert before["topic"] == "new topic" and old.hits[0].source_id != "webhooks.md"
    check = {s.name: s.detail for s in new.trace.stages}["topicCheck"]
    assert check["topic"] == "follow-up" and check["reason"].startswith("follow-up: cross-encoder: own hits answer it")
    assert check["sharedTopSource"] is False and check["relevanceMargin"] < Rules().relevance_margin
    assert check["relevanceMargin"] == round(check["ownRelevance"] - check["previousRelevance"], 4)
    assert [h.id for h in new.hits] == [h.id for h in glued.hits] and new.hits[0].source_id == "webhooks.md"
    assert {s.name: s.detail for s in new.trace.stages}["followUp"]["searched"].startswith("How do I set up webhook")


def test_a_pronoun_follow_up_whose_words_find_another_subject_is_resolved(lite_store, embedder):
    # Halden case h-f12 (hybrid): "are they covered in the van?" after a moving-house question. Its own
    # words find a motor page (0.81x the glued query's closeness, +0.199 over the moving-house hits): a
    # new topic, nDCG 0.26 against 0.92 glued. The cross-encoder finds the moving-house hits answer it
    # better than its own (margin about -7): a follow-up, searched glued, and moving-house.md leads.
    old, new, glued = _cross_encoder_case(lite_store, embedder, "halden", "help", "tests/data/final_tenants",
                                          "What should I do when I move house?", "are they covered in the van?")
    assert {s.name: s.detail for s in old.trace.stages}["topicCheck"]["topic"] == "new topic"
    assert old.hits[0].source_id != "moving-house.md"
    check = {s.name: s.detail for s in new.trace.stages}["topicCheck"]
    assert check["topic"] == "follow-up" and check["relevanceMargin"] < 0
    assert [h.id for h in new.hits] == [h.id for h in glued.hits] and new.hits[0].source_id == "moving-house.md"


def test_an_unsure_follow_up_on_a_sparse_collection_is_resolved_by_the_cross_encoder(lite_store, embedder):
    # Norrvik case n-f03 (mode: sparse): "do they need a ticket?" after "Can I bring my dog on the train?"
    # was unsure (its own words' closeness 0.71x the glued query's, +0.14 over the previous hits), and the
    # fused ranking put ticket pages its own words found ahead of pets.md (nDCG 0.00 against 1.00 glued).
    # Its own hits answer it ~5.6 logits better than the pets hits, under 6.5: a follow-up, pets.md first.
    old, new, glued = _cross_encoder_case(lite_store, embedder, "norrvik", "faq", "tests/data/final2_tenants",
                                          "Can I bring my dog on the train?", "do they need a ticket?")
    assert {s.name: s.detail for s in old.trace.stages}["topicCheck"]["topic"] == "unsure"
    assert old.hits[0].source_id != "pets.md"
    check = {s.name: s.detail for s in new.trace.stages}["topicCheck"]
    assert check["topic"] == "follow-up" and check["cosineFrom"].startswith("embedded")
    assert [h.id for h in new.hits] == [h.id for h in glued.hits] and new.hits[0].source_id == "pets.md"


def test_a_shift_far_from_the_previous_hits_stays_a_new_topic_under_the_cross_encoder(lite_store, embedder):
    # Graded acme case a-s01: "Is there a limit on the number of API keys per workspace?" after a refunds
    # question: the refunds hits do not answer it (margin about 15 logits): the cosine tests' verdict
    # stands, a new topic with its own hits.
    first, shift = "How do refunds work for a Team subscription?", "Is there a limit on the number of API keys per workspace?"
    searcher = _demo_searcher(lite_store, embedder, "acme", "docs", Rules())
    after = _turns(searcher, "acme", "docs", "keys-relevance", first, shift)[1]
    alone = _turns(searcher, "acme", "docs", None, shift)[0]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["topic"] == "new topic" and check["relevanceMargin"] >= Rules().relevance_margin
    assert [h.id for h in after.hits] == [h.id for h in alone.hits]


# The shipped rules before turns without a cue were judged (`Rules.standalone_margin`).
CUED_ONLY_RULES = Rules(standalone_margin=None)


def _standalone_case(lite_store, embedder, tenant: str, collection: str, tenants_dir: str, first: str, second: str):
    """The second turn under the rules that judge only cued turns and under the shipped ones, the second
    turn searched alone and the two turns glued."""
    before = _turns(_demo_searcher(lite_store, embedder, tenant, collection, CUED_ONLY_RULES, tenants_dir), tenant,
                    collection, f"{tenant}-cued", first, second)[1]
    searcher = _demo_searcher(lite_store, embedder, tenant, collection, Rules(), tenants_dir)
    after = _turns(searcher, tenant, collection, f"{tenant}-every", first, second)[1]
    alone = _turns(searcher, tenant, collection, None, second)[0]
    glued = _turns(searcher, tenant, collection, None, f"{first} {second}")[0]
    return before, after, alone, glued


def test_a_follow_up_without_an_anaphoric_word_is_judged_and_resolved(lite_store, embedder):
    # Kestrel case k-f08 (hybrid): "when do the bins get emptied then?" after a garden-waste sign-up
    # question has three content words and no anaphoric word: it stood alone, unjudged, and its own words
    # found the general collection-days pages (nDCG 0.63 against 1.00 glued). Judged, the garden-waste
    # hits answer it about as well as its own (margin about 0.6, below 1.5): a follow-up, searched glued,
    # and the garden-waste page leads.
    before, after, alone, glued = _standalone_case(
        lite_store, embedder, "kestrel", "help", "tests/data/final3_tenants",
        "How do I sign up for the garden waste service?", "when do the bins get emptied then?")
    assert "topicCheck" not in {s.name for s in before.trace.stages}
    assert [h.id for h in before.hits] == [h.id for h in alone.hits]
    assert before.hits[0].source_id != "garden-waste-subscription.md"
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["cue"] == "none" and check["topic"] == "follow-up"
    assert check["relevanceMargin"] < Rules().standalone_margin == check["standaloneThreshold"]
    assert check["reason"].startswith("follow-up: no anaphoric word, but cross-encoder")
    assert [h.id for h in after.hits] == [h.id for h in glued.hits]
    assert after.hits[0].source_id == "garden-waste-subscription.md"
    assert {s.name: s.detail for s in after.trace.stages}["followUp"]["resolved"] is True


def test_a_tenant_may_leave_turns_without_a_cue_unjudged(lite_store, embedder):
    # The same kestrel turn under the shipped rules, for a tenant with `judge_without_cue: false`: no
    # topic check, no cross-encoder, the turn's own words searched as they are.
    first, second = "How do I sign up for the garden waste service?", "when do the bins get emptied then?"
    searcher = _demo_searcher(lite_store, embedder, "kestrel", "help", Rules(), "tests/data/final3_tenants",
                              judge_without_cue=False)
    after = _turns(searcher, "kestrel", "help", "kestrel-unjudged", first, second)[1]
    alone = _turns(searcher, "kestrel", "help", None, second)[0]
    assert "topicCheck" not in {s.name for s in after.trace.stages}
    assert {s.name: s.detail for s in after.trace.stages}["followUp"]["resolved"] is False
    assert [h.id for h in after.hits] == [h.id for h in alone.hits]
    # A cued turn of that tenant is still judged.
    cued = _turns(searcher, "kestrel", "help", "kestrel-cued-still", first, "how much does it cost?")[1]
    assert "topicCheck" in {s.name for s in cued.trace.stages}


def test_a_follow_up_without_a_cue_whose_first_hit_is_a_previous_source_is_fused_by_the_cosine_tests(lite_store, embedder):
    # Cycla case c-f12: "for annual pass holders?" after an e-bike price question (three content words,
    # no anaphoric word) stood alone: membership-plans.md first, the e-bike prices missing from the top
    # (nDCG 0.88 against 1.00 glued). Judged, its own first hit is one of the previous turn's sources, so
    # the margin is not read and the cosine tests decide: unsure, the glued ranking fused with its own.
    before, after, alone, glued = _standalone_case(
        lite_store, embedder, "cycla", "help", "tests/data/fresh_tenants",
        "How much does an e-bike ride cost?", "for annual pass holders?")
    assert [h.id for h in before.hits] == [h.id for h in alone.hits]
    assert before.hits[0].source_id == "membership-plans.md"
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["cue"] == "none" and check["sharedTopSource"] is True and check["topic"] == "unsure"
    assert check["ownRelevance"] is None and check["ownCosine"] is not None
    # Both pages the whole question needs come first (its own words alone rank the e-bike page 4th).
    def sources(result):
        return list(dict.fromkeys(h.source_id for h in result.hits))

    assert set(sources(after)[:2]) == {"membership-plans.md", "e-bikes-and-charging.md"}
    assert "e-bikes-and-charging.md" not in sources(alone)[:2]


def test_a_shift_without_a_cue_stays_alone_when_judged(lite_store, embedder):
    # Kestrel case k-s12: "sharps box collection" after a trailer-permit question: its own hits answer it
    # about 18 logits better than the permit pages: it stands alone, with the hits it finds by itself.
    _, after, alone, glued = _standalone_case(lite_store, embedder, "kestrel", "help", "tests/data/final3_tenants",
                                              "Do I need a permit for a trailer?", "sharps box collection")
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["cue"] == "none" and check["topic"] == "new topic" and check["relevanceMargin"] >= 4.5 >= \
        Rules().standalone_margin
    assert check["ownCosine"] is None  # judged by the margin alone: no cosine computed
    assert [h.id for h in after.hits] == [h.id for h in alone.hits] != [h.id for h in glued.hits]
    assert after.hits[0].source_id == "clinical-waste.md"
    assert {s.name: s.detail for s in after.trace.stages}["conversation"]["boostFromTurn"] is None  # stood alone


def test_an_unsure_turn_whose_glued_query_lost_what_it_asks_leans_on_its_own_words(lite_store, embedder):
    # Norrvik case n-s10 (sparse): "Someone is harassing passengers, how do I report that?" after a
    # lost-property question. Its own first hit (safety-and-security.md) is one of the previous turn's
    # sources, so the margin is not read and the cosine tests find it unsure; the glued query leads with
    # lost-property.md. The cross-encoder finds its own first hit answers it about 9.8 logits better than the
    # glued query's first hit does (>= 8): the fusion leans on its own words (the resolved ranking weighs
    # 0.5) and the safety page comes first (nDCG 1.00; leaning on the glued query, 0.63).
    first, shift = "How do I report something I lost on a train?", "Someone is harassing passengers, how do I report that?"
    shipped = _demo_searcher(lite_store, embedder, "norrvik", "faq", Rules(), "tests/data/final2_tenants")
    after = _turns(shipped, "norrvik", "faq", "norrvik-lean", first, shift)[1]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["topic"] == "unsure" and check["sharedTopSource"] is True
    assert check["firstHitMargin"] >= Rules().first_hit_margin == check["firstHitThreshold"]
    assert check["unsureWeight"] == Rules().first_hit_weight == 0.5
    assert "resolved ranking weighs 0.5" in check["reason"]
    assert after.hits[0].source_id == "safety-and-security.md"
    # Without the arbitration the same turn is fused leaning on the glued query: lost-property.md first.
    unleaned = _demo_searcher(lite_store, embedder, "norrvik", "faq",
                              Rules(first_hit_margin=None, shared_first_margin=None), "tests/data/final2_tenants")
    before = _turns(unleaned, "norrvik", "faq", "norrvik-unleaned", first, shift)[1]
    check = {s.name: s.detail for s in before.trace.stages}["topicCheck"]
    assert check["topic"] == "unsure" and check["unsureWeight"] == 1.3 and check["firstHitMargin"] is None
    assert before.hits[0].source_id == "lost-property.md"


def test_an_unsure_follow_up_whose_own_first_hit_answers_it_keeps_leaning_on_the_glued_query(lite_store, embedder):
    # Tallmo case t-f10 (sparse): "how fast can I get a replacement SIM?" after a stolen phone is unsure (its own
    # first hit is a previous source) and both rankings lead with pages about as good (first hits about 0.3
    # logits apart, below 8), but that hit answers its own words well (logit about 4.5, not below -1.5): the
    # turn is fused leaning on the glued query as before, and the SIM page its own words found moves up (nDCG
    # 1.00 against 0.80 glued).
    searcher = _demo_searcher(lite_store, embedder, "tallmo", "faq", Rules(), "tests/data/final5_tenants")
    after = _turns(searcher, "tallmo", "faq", "tallmo-unsure", "My phone was stolen on the train this morning.",
                   "how fast can I get a replacement SIM?")[1]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["topic"] == "unsure" and check["sharedTopSource"] is True
    assert check["firstHitMargin"] < Rules().first_hit_margin and check["firstHitMargin"] < Rules().shared_first_margin
    assert check["ownFirstRelevance"] >= Rules().shared_first_logit == check["sharedFirstLogit"]
    assert check["unsureWeight"] == Rules().unsure_weight == 1.3


def test_an_unsure_follow_up_whose_own_first_hit_is_a_poor_previous_page_is_searched_resolved(lite_store, embedder):
    # Eskerud case e-f07 (hybrid): "why do you charge that?" after a 45-euro charge for a speeding ticket. Its own
    # first hit (electric-cars.md) is one of the previous turn's pages, so the margin is not read and the cosine
    # tests find it unsure. That page answers its own words poorly (logit about -1.7, below -1.5) and the glued
    # query's first hit (traffic-fines-and-tolls.md, the one page that says why) about 2.3 logits better still
    # (below 4): the turn is a follow-up searched resolved, the fines page first (nDCG 1.00; fused, 0.63).
    first = "I got a speeding ticket in your car in Italy and you've charged me 45 euros."
    second = "why do you charge that?"
    shipped = _demo_searcher(lite_store, embedder, "eskerud", "help", Rules(), "tests/data/final5_tenants")
    after = _turns(shipped, "eskerud", "help", "eskerud-resolved", first, second)[1]
    glued = _turns(shipped, "eskerud", "help", None, f"{first} {second}")[0]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["topic"] == "follow-up" and check["sharedTopSource"] is True
    assert check["ownFirstRelevance"] < Rules().shared_first_logit == -1.5
    assert check["firstHitMargin"] < Rules().shared_first_margin == check["sharedFirstThreshold"] == 4.0
    assert check["reason"].startswith("follow-up: its own first hit is a previous source that answers it poorly")
    assert "/electric-cars.md/" in check["ownTopHit"]
    assert [h.id for h in after.hits] == [h.id for h in glued.hits]
    assert after.hits[0].source_id == "traffic-fines-and-tolls.md"
    assert {s.name: s.detail for s in after.trace.stages}["followUp"]["resolved"] is True
    # Without it (the third round's rules) the same turn is fused with its own words, which push the fines
    # page down.
    fused = _demo_searcher(lite_store, embedder, "eskerud", "help", Rules(shared_first_margin=None),
                           "tests/data/final5_tenants")
    before = _turns(fused, "eskerud", "help", "eskerud-fused", first, second)[1]
    check = {s.name: s.detail for s in before.trace.stages}["topicCheck"]
    assert check["topic"] == "unsure" and check["unsureWeight"] == 1.3
    assert before.hits[0].source_id != "traffic-fines-and-tolls.md"


def test_a_shift_without_a_cue_just_above_the_margin_stands_alone(lite_store, embedder):
    # Tallmo case t-s10 (sparse): "How do I block my number from showing when I call someone?" after "How do I
    # block scam calls?" has no cue; its own hits answer it about 1.7 logits better than the scam-call pages.
    # Below 4.5 (the third round) it was a follow-up, glued, and the scam-call page led (nDCG 0.63); from 1.5
    # (chosen over fourteen sets) it stands alone and the call-features page leads (1.00).
    first, second = "How do I block scam calls?", "How do I block my number from showing when I call someone?"
    shipped = _demo_searcher(lite_store, embedder, "tallmo", "faq", Rules(), "tests/data/final5_tenants")
    after = _turns(shipped, "tallmo", "faq", "tallmo-alone", first, second)[1]
    alone = _turns(shipped, "tallmo", "faq", None, second)[0]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["cue"] == "none" and check["topic"] == "new topic"
    assert Rules().standalone_margin == check["standaloneThreshold"] == 1.5 <= check["relevanceMargin"] < 4.5
    assert [h.id for h in after.hits] == [h.id for h in alone.hits]
    assert after.hits[0].source_id == "voicemail-and-call-features.md"
    third = _demo_searcher(lite_store, embedder, "tallmo", "faq", Rules(standalone_margin=4.5),
                           "tests/data/final5_tenants")
    before = _turns(third, "tallmo", "faq", "tallmo-glued", first, second)[1]
    assert {s.name: s.detail for s in before.trace.stages}["topicCheck"]["topic"] == "follow-up"
    assert before.hits[0].source_id == "spam-calls-and-scam-texts.md"


def test_a_shift_whose_pronoun_refers_to_an_earlier_clause_of_the_turn_stands_alone(lite_store, embedder):
    # Kraftholm case k-s09 (hybrid): "My son is 14, can he use the gym with me?" after a guest-pass question. "he"
    # refers to "my son", in the turn's first clause: the turn has no cue and is judged as a turn without one. Its
    # own hits answer it about 5.5 logits better than the guest-pass pages (from 1.5): it stands alone and the
    # teen-membership page leads (nDCG 0.98). Taken for a cue (the fourth round), it was a follow-up below 6.5,
    # glued, and guest-passes.md led (0.79).
    first, second = "How many guest passes do I get each month?", "My son is 14, can he use the gym with me?"
    shipped = _demo_searcher(lite_store, embedder, "kraftholm", "help", Rules(), "tests/data/final6_tenants")
    after = _turns(shipped, "kraftholm", "help", "kraftholm-clause", first, second)[1]
    alone = _turns(shipped, "kraftholm", "help", None, second)[0]
    stages = {s.name: s.detail for s in after.trace.stages}
    assert stages["topicCheck"]["cue"] == "none" and stages["topicCheck"]["topic"] == "new topic"
    assert stages["topicCheck"]["relevanceMargin"] >= Rules().standalone_margin
    assert [h.id for h in after.hits] == [h.id for h in alone.hits]
    assert after.hits[0].source_id == "teen-memberships.md"
    fourth = _demo_searcher(lite_store, embedder, "kraftholm", "help", Rules(clause_words=0, measure_it=False),
                            "tests/data/final6_tenants")
    before = _turns(fourth, "kraftholm", "help", "kraftholm-cue", first, second)[1]
    stages = {s.name: s.detail for s in before.trace.stages}
    assert stages["followUp"]["reason"] == "anaphoric word 'he'" and stages["topicCheck"]["topic"] == "follow-up"
    assert before.hits[0].source_id == "guest-passes.md"


def test_an_extraposed_it_before_cost_to_is_no_cue(lite_store, embedder):
    # Sandvoll case sv-s10 (sparse): "How much does it cost to insure a parcel worth 20,000 kr?" after a postage
    # price question: "it" stands for "to insure a parcel", and the turn is judged without a cue (margin about
    # 3.6, from 1.5): alone, extra-cover.md first (nDCG 0.94; glued, the postage pages pushed it out, 0.55).
    first, second = "How much does it cost to send a medium parcel?", \
        "How much does it cost to insure a parcel worth 20,000 kr?"
    shipped = _demo_searcher(lite_store, embedder, "sandvoll", "faq", Rules(), "tests/data/final6_tenants")
    after = _turns(shipped, "sandvoll", "faq", "sandvoll-measure", first, second)[1]
    stages = {s.name: s.detail for s in after.trace.stages}
    assert stages["topicCheck"]["cue"] == "none" and stages["topicCheck"]["topic"] == "new topic"
    assert after.hits[0].source_id == "extra-cover.md"
    fourth = _demo_searcher(lite_store, embedder, "sandvoll", "faq", Rules(clause_words=0, measure_it=False),
                            "tests/data/final6_tenants")
    before = _turns(fourth, "sandvoll", "faq", "sandvoll-cue", first, second)[1]
    assert {s.name: s.detail for s in before.trace.stages}["topicCheck"]["topic"] == "follow-up"
    assert before.hits[0].source_id != "extra-cover.md"


def test_a_turn_without_a_cue_after_a_stated_situation_is_fused_not_left_alone(lite_store, embedder):
    # Solbakken case sb-f10 (hybrid): "can we move to another room?" after "The people in the room next to ours have
    # been playing loud music since midnight." has no cue, and its own hits answer it about 11.6 logits better than
    # the previous turn's (from 1.5): under the fifth round's rules it stood alone and accessibility.md led (nDCG
    # 0.60 against 0.96 glued). The previous turn asks nothing, so the seventh round's rules fuse the glued and own
    # rankings, the glued one weighing 2.0: noise-and-quiet-hours.md, the page it means, leads (0.94).
    first, second = "The people in the room next to ours have been playing loud music since midnight.", \
        "can we move to another room?"
    shipped = _demo_searcher(lite_store, embedder, "solbakken", "help", Rules(), "tests/data/final7_tenants")
    after = _turns(shipped, "solbakken", "help", "solbakken-hedged", first, second)[1]
    check = {s.name: s.detail for s in after.trace.stages}["topicCheck"]
    assert check["cue"] == "none" and check["topic"] == "unsure" and check["unsureWeight"] == 2.0
    assert check["relevanceMargin"] >= Rules().standalone_margin
    assert "the previous turn states a situation and asks nothing" in check["reason"]
    assert after.hits[0].source_id == "noise-and-quiet-hours.md"
    fifth = _demo_searcher(lite_store, embedder, "solbakken", "help", Rules(statement_role="off"),
                           "tests/data/final7_tenants")
    before = _turns(fifth, "solbakken", "help", "solbakken-alone", first, second)[1]
    assert {s.name: s.detail for s in before.trace.stages}["topicCheck"]["topic"] == "new topic"
    assert before.hits[0].source_id != "noise-and-quiet-hours.md"
