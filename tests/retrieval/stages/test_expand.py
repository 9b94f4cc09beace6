"""parentExpand's window: centred on the matched child, never cut from the parent's start."""

from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.retrieval.stages.expand import ParentExpand, window
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import ParentExpandParams
from tests.conftest import make_ref
from tests.retrieval.stages.hits import make_hit

SENTENCES = " ".join(f"Sentence number {i} is about nothing much." for i in range(40))


def test_window_contains_a_late_child_and_grows_around_it():
    child = "Sentence number 30 is about nothing much."
    start = SENTENCES.find(child)
    assert start > 953  # the case: a child far past the window's size
    text, located = window(SENTENCES, child, 467)
    assert located and child in text and len(text) <= 467
    before, _, after = text.partition(child)
    # Centred: the context on each side differs by at most one sentence.
    assert abs(len(before) - len(after)) <= len("Sentence number 31 is about nothing much. ")
    assert text.startswith("Sentence number") and text.endswith(".")


def test_window_at_the_edges_and_when_the_child_is_not_found():
    first = "Sentence number 0 is about nothing much."
    text, located = window(SENTENCES, first, 200)
    assert located and text.startswith(first) and len(text) <= 200
    last = "Sentence number 39 is about nothing much."
    text, located = window(SENTENCES, last, 200)
    assert located and text.endswith(last) and len(text) <= 200
    text, located = window(SENTENCES, "rewritten by compress", 200)
    assert not located and text.startswith("Sentence number 0") and len(text) <= 200
    assert window("short parent", "short", 200) == ("short parent", True)


async def test_parent_expand_centres_the_parent_on_a_late_child(lite_store, embedder):
    ref = make_ref("expandc", chunking={"child_chars": 120, "child_overlap": 0, "parent_chars": 4000})
    lite_store.drop(ref.scope)
    text = SENTENCES + " Refund timing depends on the bank and takes five business days."
    ingest_documents(lite_store, embedder, ref, [Document("refunds", text, title="Refunds")], progress=False)
    hits = await CollectionRetriever(lite_store, embedder, ref).retrieve(
        Query("refund timing bank"), SearchOptions(mode=Mode.SPARSE, limit=1))
    assert hits[0].content.startswith("Refund timing") or "Refund timing" in hits[0].content
    handle = StageHandle(1)
    [out] = await ParentExpand(ParentExpandParams.model_validate({"maxParentChars": 300}), lite_store).apply(
        StageRequest("q", 1), hits, handle)
    assert out.parent is not None and len(out.parent.content) <= 300
    assert out.content in out.parent.content and not out.parent.content.startswith("Sentence number 0 ")
    assert handle.warnings == []


async def test_parent_expand_warns_when_an_earlier_stage_changed_the_child(lite_store, embedder):
    ref = make_ref("expandw", chunking={"child_chars": 120, "child_overlap": 0, "parent_chars": 4000})
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, [Document("s", SENTENCES)], progress=False)
    [hit] = await CollectionRetriever(lite_store, embedder, ref).retrieve(
        Query("Sentence number 30"), SearchOptions(mode=Mode.SPARSE, limit=1))
    changed = make_hit("s", 1.0, "a compressed rewrite", chunk_id=hit.chunk_id, tenant=hit.provenance.tenant,
                       namespace=hit.namespace, collection=hit.collection, parent_key=hit.parent_key)
    handle = StageHandle(1)
    [out] = await ParentExpand(ParentExpandParams.model_validate({"maxParentChars": 200}), lite_store).apply(
        StageRequest("q", 1), [changed], handle)
    assert out.parent is not None and out.parent.content.startswith("Sentence number 0")
    assert "not found in their parent's text" in handle.warnings[0]
