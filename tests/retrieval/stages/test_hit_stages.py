"""parentExpand, compress, diversify, decay, abstain and custom stages."""

from datetime import UTC, datetime, timedelta

import pytest

from gateway.errors import ConfigError, InvalidInput
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.retrieval.stages.abstain import Abstain
from gateway.retrieval.stages.compress import Compress, split_sentences
from gateway.retrieval.stages.custom import Custom
from gateway.retrieval.stages.decay import Decay
from gateway.retrieval.stages.diversify import Diversify, jaccard, shingles
from gateway.retrieval.stages.expand import ParentExpand
from gateway.retrieval.trace import StageHandle
from gateway.storage.analyzer import Analyzer
from gateway.tenancy.pipelines import (
    AbstainParams,
    CompressParams,
    CustomParams,
    DecayParams,
    DiversifyParams,
    ParentExpandParams,
)
from tests.conftest import make_ref
from tests.retrieval.stages.hits import make_hit

LONG = ("Refunds are issued to the original card. " * 3 + "Chargebacks need a case number. "
        + "Refund timing depends on the bank and takes five business days. " + "Our office has plants. " * 3)


async def test_parent_expand_attaches_cut_parents_and_keeps_identity(lite_store, embedder):
    ref = make_ref("expand", chunking={"child_chars": 100, "child_overlap": 0, "parent_chars": 400})
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, [Document("refunds", LONG, title="Refunds")], progress=False)
    hits = await CollectionRetriever(lite_store, embedder, ref).retrieve(
        Query("refund timing bank"), SearchOptions(mode=Mode.SPARSE, limit=2))
    stage = ParentExpand(ParentExpandParams.model_validate({"maxParentChars": 120}), lite_store)
    out = await stage.apply(StageRequest("q", 2), hits, StageHandle(len(hits)))
    assert [(h.id, h.score, h.content) for h in out] == [(h.id, h.score, h.content) for h in hits]
    assert all(h.parent is not None and h.parent.key == h.parent_key for h in out)
    assert all(len(h.parent.content) <= 120 for h in out)
    # The parent window is centred on the matched child, not cut from the parent's start.
    assert all(h.content in h.parent.content for h in out)


async def test_parent_expand_missing_policies(lite_store):
    orphan = make_hit("ghost", 0.5, parent_key="ghost#p0", tenant="expand", namespace="docs", collection="guides")
    handle = StageHandle(1)
    out = await ParentExpand(ParentExpandParams(), lite_store).apply(StageRequest("q", 1), [orphan], handle)
    assert out == [orphan] and "1 hit(s) have no parent record: docs/ghost/c0" in handle.warnings[0]
    quiet = StageHandle(1)
    await ParentExpand(ParentExpandParams.model_validate({"missing": "ignore"}), lite_store).apply(
        StageRequest("q", 1), [orphan], quiet)
    assert quiet.warnings == []
    with pytest.raises(InvalidInput, match="missing: error"):
        await ParentExpand(ParentExpandParams.model_validate({"missing": "error"}), lite_store).apply(
            StageRequest("q", 1), [orphan], StageHandle(1))


async def test_compress_keeps_the_query_sentences_in_order_and_records_length():
    hit = make_hit("refunds", 0.9, LONG)
    handle = StageHandle(1)
    stage = Compress(CompressParams.model_validate({"maxCharsPerHit": 80}), Analyzer())
    [out] = await stage.apply(StageRequest("how long does refund timing take at the bank", 1), [hit], handle)
    assert out.content == "Refund timing depends on the bank and takes five business days."
    assert out.provenance.original_chars == len(LONG) and out.id == hit.id and out.score == hit.score
    assert all(sentence in split_sentences(LONG) for sentence in split_sentences(out.content))
    assert handle.detail["chars_before"] == len(LONG) and handle.detail["chars_after"] == len(out.content)


async def test_compress_leaves_short_hits_alone():
    hit = make_hit("short", 0.9, "One sentence only.")
    [out] = await Compress(CompressParams(), Analyzer()).apply(StageRequest("q", 1), [hit], StageHandle(1))
    assert out == hit


async def test_compress_drops_hits_with_no_excerpt_when_asked_and_names_them_in_the_trace():
    hits = [make_hit("refunds", 0.9, LONG), make_hit("plants", 0.8, "Our office has plants. They are green."),
            make_hit("short", 0.7, "Refund timing is five days.")]
    question = StageRequest("how long does refund timing take at the bank", 3)
    # The default keeps a hit with no matching sentence (its opening).
    kept = await Compress(CompressParams.model_validate({"maxCharsPerHit": 80}), Analyzer()).apply(
        question, hits, StageHandle(3))
    assert [h.source_id for h in kept] == ["refunds", "plants", "short"]
    handle = StageHandle(3)
    params = CompressParams.model_validate({"maxCharsPerHit": 80, "unmatched": "drop"})
    out = await Compress(params, Analyzer()).apply(question, hits, handle)
    assert [h.source_id for h in out] == ["refunds", "short"]
    assert out[0].content == "Refund timing depends on the bank and takes five business days." and out[1] == hits[2]
    assert handle.detail["dropped"] == 1
    assert handle.warnings == [f"compress dropped 1 hit(s) with no excerpt matching the question (unmatched: drop): "
                               f"{hits[1].id}"]
    # A question of stop words alone matches no sentence: nothing is dropped, and the trace says why.
    handle = StageHandle(3)
    assert len(await Compress(params, Analyzer()).apply(StageRequest("how is it", 3), hits, handle)) == 3
    assert "the question has no indexable terms" in handle.warnings[0]


def test_compress_unmatched_takes_keep_or_drop():
    with pytest.raises(ValueError, match="'keep' or 'drop'"):
        CompressParams.model_validate({"unmatched": "hide"})


GERMAN = ("Das Wetter war gestern schön und warm. Die Häuser der Altstadt wurden im Sommer neu gestrichen. "
          "Der Bahnhof liegt im Norden der Stadt.")


async def test_compress_reads_a_hit_in_its_collections_language():
    from gateway.storage.analyzer import Language

    hit = make_hit("de", 0.9, GERMAN, collection="wiki")
    stage = Compress(CompressParams.model_validate({"maxCharsPerHit": 70}), Analyzer())
    german = StageRequest("Wann wurde das Haus gestrichen?", 1, languages={("support", "wiki"): Language.DE})
    [out] = await stage.apply(german, [hit], StageHandle(1))
    assert out.content == "Die Häuser der Altstadt wurden im Sommer neu gestrichen."
    # In English "Haus" is not a stem of "Häuser", and "gestrichen" matches as a whole word only: the
    # same sentence wins on that word alone, and a question whose only match is the stem finds nothing.
    [english] = await stage.apply(StageRequest("Wann wurde das Haus?", 1), [hit], StageHandle(1))
    [stemmed] = await stage.apply(StageRequest("Wann wurde das Haus?", 1, languages={("support", "wiki"): Language.DE}),
                                  [hit], StageHandle(1))
    assert english.content == "Das Wetter war gestern schön und warm."
    assert stemmed.content == "Die Häuser der Altstadt wurden im Sommer neu gestrichen."


def test_shingles_and_jaccard():
    assert shingles("a b c d", 2) == {("a", "b"), ("b", "c"), ("c", "d")}
    assert jaccard(shingles("a b c d", 2), shingles("a b c e", 2)) == pytest.approx(2 / 4)


async def test_diversify_pushes_near_duplicates_and_same_source_down():
    text = "refunds reach the original card within five business days"
    hits = [make_hit("a", 1.0, text), make_hit("a", 0.95, text + " always", chunk_id="c1"),
            make_hit("b", 0.9, "chargebacks need a case number from the bank"), make_hit("c", 0.5, "unrelated plants")]
    out = await Diversify(DiversifyParams.model_validate({"lambda": 0.5, "sourcePenalty": 0.3, "limit": 3})).apply(
        StageRequest("q", 10), hits, StageHandle(4))
    assert [h.id for h in out] == ["support/a/c0", "support/b/c0", "support/c/c0"]
    assert out[0].score >= out[1].score >= out[2].score
    plain = await Diversify(DiversifyParams.model_validate({"lambda": 1.0})).apply(
        StageRequest("q", 10), hits, StageHandle(4))
    assert [h.id for h in plain] == [h.id for h in hits]  # lambda 1 is relevance only


async def test_decay_halves_per_half_life_and_handles_missing():
    now = datetime(2026, 1, 31, tzinfo=UTC)
    hits = [make_hit("old", 1.0, metadata={"published": "2026-01-01T00:00:00Z"}),
            make_hit("new", 0.8, metadata={"published": int((now - timedelta(days=1)).timestamp())}),
            make_hit("none", 0.9)]
    params = DecayParams.model_validate({"field": "metadata.published", "halfLifeDays": 30})
    out = {h.source_id: h.score for h in await Decay(params, clock=lambda: now).apply(
        StageRequest("q", 3), hits, StageHandle(3))}
    assert out["old"] == pytest.approx(0.5)
    assert out["new"] == pytest.approx(0.8 * 0.5 ** (1 / 30))
    assert out["none"] == 0.9  # missing: ignore
    penal = DecayParams.model_validate({"field": "metadata.published", "halfLifeDays": 30, "missing": "penalize",
                                        "missingFactor": 0.1})
    handle = StageHandle(3)
    out = {h.source_id: h.score for h in await Decay(penal, clock=lambda: now).apply(StageRequest("q", 3), hits, handle)}
    assert out["none"] == pytest.approx(0.09) and "penalised" in handle.warnings[0]
    strict = DecayParams.model_validate({"field": "metadata.published", "halfLifeDays": 30, "missing": "error"})
    with pytest.raises(InvalidInput, match="no timestamp in 'metadata.published'"):
        await Decay(strict, clock=lambda: now).apply(StageRequest("q", 3), hits, StageHandle(3))


async def test_decay_on_updated_at():
    now = datetime(2026, 1, 31, tzinfo=UTC)
    hit = make_hit("x", 1.0, updated_at=now - timedelta(days=10))
    [out] = await Decay(DecayParams.model_validate({"halfLifeDays": 10}), clock=lambda: now).apply(StageRequest("q", 1), [hit], StageHandle(1))
    assert out.score == pytest.approx(0.5)


async def test_abstain_returns_nothing_and_says_why():
    handle = StageHandle(2)
    out = await Abstain(AbstainParams(threshold=0.6)).apply(StageRequest("q", 2), [make_hit("a", 0.55), make_hit("b", 0.3)], handle)
    assert out == [] and handle.detail["abstained"] is True
    assert "best score 0.5500 is under the threshold 0.6" in handle.warnings[0]
    kept = await Abstain(AbstainParams(threshold=0.5)).apply(StageRequest("q", 2), [make_hit("a", 0.55)], StageHandle(1))
    assert [h.source_id for h in kept] == ["a"]


async def test_custom_stage_sync_async_and_guards():
    hits = [make_hit("a", 0.5, title="A"), make_hit("b", 0.9)]
    boost = Custom(CustomParams(function="tests.retrieval.stages.sample_stages:boost_titles", params={"factor": 3}), "t")
    out = await boost.apply(StageRequest("q", 2), hits, StageHandle(2))
    assert [(h.source_id, h.score) for h in out] == [("a", 1.5), ("b", 0.9)] and boost.name.startswith("custom:")
    first = Custom(CustomParams(function="tests.retrieval.stages.sample_stages:keep_first"), "t")
    assert len(await first.apply(StageRequest("q", 2), hits, StageHandle(2))) == 1
    with pytest.raises(InvalidInput, match="returned hits it was not given"):
        await Custom(CustomParams(function="tests.retrieval.stages.sample_stages:invent"), "t").apply(
            StageRequest("q", 2), hits, StageHandle(2))
    with pytest.raises(InvalidInput, match="must return a list of Hit"):
        await Custom(CustomParams(function="tests.retrieval.stages.sample_stages:not_a_list"), "t").apply(
            StageRequest("q", 2), hits, StageHandle(2))


def test_custom_stage_is_checked_when_built():
    with pytest.raises(ConfigError, match=r"must accept \(query, hits, params\)"):
        Custom(CustomParams(function="tests.retrieval.stages.sample_stages:wrong_shape"), "tenant 'acme' pipeline")
    with pytest.raises(ConfigError, match="cannot import module 'tests.nowhere'"):
        Custom(CustomParams(function="tests.nowhere:f"), "tenant 'acme' pipeline")


async def test_abstain_on_a_named_signal():
    from dataclasses import replace

    from gateway.retrieval.hit import SignalScore

    hit = make_hit("a", 1.0)  # a relative blend score of 1.0 says nothing about evidence
    hit = replace(hit, provenance=replace(hit.provenance, scores=(*hit.provenance.scores,
                                                                  SignalScore("rerank:lateInteraction", 0.21, 1))))
    handle = StageHandle(1)
    params = AbstainParams.model_validate({"threshold": 0.3, "signal": "rerank:lateInteraction"})
    assert await Abstain(params).apply(StageRequest("q", 1), [hit], handle) == []
    assert "best rerank:lateInteraction score 0.2100 is under the threshold 0.3" in handle.warnings[0]
    handle = StageHandle(1)
    assert await Abstain(params).apply(StageRequest("q", 1), [make_hit("b", 1.0)], handle) == []
    assert "no hit has a rerank:lateInteraction score" in handle.warnings[0]


async def test_llm_compress_keeps_only_the_hits_own_sentences():
    import json

    from gateway.errors import UpstreamUnavailable
    from gateway.retrieval.llm import ChatClient
    from tests.loopback import loopback_server

    def choose(path, body):
        assert "5. Refund timing depends" in body["messages"][1]["content"]
        return 200, {"choices": [{"message": {"content": json.dumps({"keep": [5, 99, 5]})}}]}

    hit = make_hit("refunds", 0.9, LONG)
    params = CompressParams.model_validate({"method": "llm", "maxCharsPerHit": 100})
    with loopback_server(choose) as (url, _):
        [out] = await Compress(params, Analyzer(), ChatClient(url, "m")).apply(StageRequest("timing", 1), [hit],
                                                                               StageHandle(1))
    assert out.content == "Refund timing depends on the bank and takes five business days."
    assert out.provenance.original_chars == len(LONG)
    # The model keeping no sentence: the hit's opening stays, or with unmatched: drop the hit goes.
    none_kept = lambda path, body: (200, {"choices": [{"message": {"content": '{"keep": [99]}'}}]})  # noqa: E731
    with loopback_server(none_kept) as (url, _):
        [opening] = await Compress(params, Analyzer(), ChatClient(url, "m")).apply(StageRequest("timing", 1), [hit],
                                                                                   StageHandle(1))
        dropping = CompressParams.model_validate({"method": "llm", "maxCharsPerHit": 100, "unmatched": "drop"})
        handle = StageHandle(1)
        assert await Compress(dropping, Analyzer(), ChatClient(url, "m")).apply(StageRequest("timing", 1), [hit],
                                                                                handle) == []
    assert opening.content == "Refunds are issued to the original card." and handle.detail["dropped"] == 1
    with loopback_server(lambda path, body: (200, {"choices": [{"message": {"content": '{"keep": "all"}'}}]})) as (url, _):
        with pytest.raises(UpstreamUnavailable, match="'keep' list of numbers"):
            await Compress(params, Analyzer(), ChatClient(url, "m")).apply(StageRequest("q", 1), [hit], StageHandle(1))


async def test_decay_diversify_and_custom_name_their_score_changes_in_provenance():
    now = datetime(2026, 1, 31, tzinfo=UTC)
    old = make_hit("old", 1.0, metadata={"published": "2026-01-01T00:00:00Z"})
    new = make_hit("new", 0.8, metadata={"published": "2026-01-31T00:00:00Z"})
    decay = await Decay(DecayParams.model_validate({"field": "metadata.published", "halfLifeDays": 30}),
                        clock=lambda: now).apply(StageRequest("q", 2), [old, new], StageHandle(2))
    signals = {h.source_id: h.provenance.scores[-1] for h in decay}
    assert (signals["new"].signal, signals["new"].raw, signals["new"].rank) == ("decay", 1.0, 1)
    assert (signals["old"].signal, signals["old"].raw, signals["old"].rank) == ("decay", pytest.approx(0.5), 2)

    hits = [make_hit("a", 1.0, "refunds to the card"), make_hit("b", 0.9, "chargebacks need a case"),
            make_hit("c", 0.2, "plants")]
    handle = StageHandle(3)
    picked = await Diversify(DiversifyParams.model_validate({"lambda": 0.5, "limit": 2})).apply(
        StageRequest("q", 2), hits, handle)
    assert [(h.provenance.scores[-1].signal, h.provenance.scores[-1].rank) for h in picked] == [
        ("diversify", 1), ("diversify", 2)]
    assert all(h.provenance.scores[-1].raw == h.score for h in picked) and handle.detail["dropped"] == 1

    handle = StageHandle(2)
    function = "tests.retrieval.stages.sample_stages:boost_titles"
    boost = Custom(CustomParams(function=function, params={"factor": 3}), "t")
    out = await boost.apply(StageRequest("q", 2), [make_hit("a", 0.5, title="A"), make_hit("b", 0.9)], handle)
    assert [s.signal for s in out[0].provenance.scores] == ["dense", f"custom:{function}"]
    assert out[0].provenance.scores[-1].raw == 1.5
    assert [s.signal for s in out[1].provenance.scores] == ["dense"]  # its score did not change
    assert handle.detail["rescored"] == 1 and handle.detail["dropped"] == 0

    handle = StageHandle(2)
    first = Custom(CustomParams(function="tests.retrieval.stages.sample_stages:keep_first"), "t")
    await first.apply(StageRequest("q", 2), [make_hit("a", 0.9), make_hit("b", 0.5)], handle)
    assert handle.detail["dropped"] == 1 and handle.warnings == [
        "custom:tests.retrieval.stages.sample_stages:keep_first dropped 1 hit(s): support/b/c0"]
