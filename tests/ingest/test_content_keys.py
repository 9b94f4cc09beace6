"""The text a chunk is embedded and BM25-indexed from, per the collection's content_keys."""

import numpy as np
import pytest

from gateway.ingest.content_keys import compose
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.ingest.verify import verify_collection
from gateway.retrieval.options import Mode
from gateway.tenancy.config import CollectionConfig, ContentKeysConfig
from tests.conftest import make_ref
from tests.ingest.test_sync import search


def test_the_default_keys_are_the_title_line_then_the_text():
    assert compose(("title", "content"), title="Refunds", content="Five days.", metadata={}) == "Refunds\nFive days."
    assert compose(("title", "content"), title="", content="Five days.", metadata={}) == "Five days."


def test_metadata_keys_render_strings_lists_and_numbers_and_missing_ones_add_nothing():
    metadata = {"tags": ["billing", "eu", 3], "year": 2024, "empty": "", "nested": {"a": 1}}
    keys = ("metadata.tags", "metadata.year", "metadata.empty", "metadata.absent", "metadata.nested", "content")
    assert compose(keys, title="T", content="text", metadata=metadata) == 'billing, eu, 3\n2024\n{"a": 1}\ntext'
    # A chunk with none of its keys falls back to its own text: nothing is embedded empty.
    assert compose(("metadata.absent",), title="T", content="text", metadata={}) == "text"


@pytest.mark.parametrize(("keys", "message"), [
    ({"embed": []}, "content_keys.embed is empty; allowed: a list of title, content"),
    ({"index": ["body"]}, "content_keys.index: 'body' is not a content key; allowed: title, content"),
    ({"index": ["metadata.bad key"]}, "'metadata.bad key' is not a content key"),
])
def test_unknown_or_empty_content_keys_are_refused_naming_the_allowed_set(keys, message):
    with pytest.raises(ValueError, match=message):
        CollectionConfig(trust_tier="first-party", content_keys=keys)


def test_content_keys_are_refused_where_nothing_is_embedded_from_text():
    with pytest.raises(ValueError, match="an image collection embeds its images"):
        CollectionConfig(trust_tier="first-party", modality=["image"], image_encoder="colour-layout",
                         content_keys={"embed": ["title"]})
    with pytest.raises(ValueError, match="content_keys need kind: documents"):
        CollectionConfig(trust_tier="first-party", kind="memory", content_keys={"index": ["content"]})


def test_the_camel_case_spelling_is_accepted_and_duplicates_collapse():
    config = CollectionConfig.model_validate({"trust_tier": "first-party",
                                              "contentKeys": {"embed": ["content", "content", "title"]}})
    assert config.content_keys == ContentKeysConfig(embed=("content", "title"))
    assert ContentKeysConfig().tag == "" and config.content_keys.tag == "embed=content,title;index=title,content"


DOCS = [
    Document("eu-vat", "Invoices show the tax rate of the buyer's country.", title="Quarterly statements",
             metadata={"tags": ["reverse-charge", "vat"]}),
    Document("cards", "Card payments settle within two days.", title="Settlement windows",
             metadata={"tags": ["payments"]}),
]


def test_index_and_embed_keys_decide_what_bm25_and_the_vector_see(lite_store, embedder):
    ref = make_ref(collection="content_keys", content_keys={"embed": ["title"], "index": ["content", "metadata.tags"]})
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    # A tag is indexed, the title is not.
    assert [h.source_id for h in search(lite_store, embedder, ref, "reverse-charge", Mode.SPARSE)] == ["eu-vat"]
    assert search(lite_store, embedder, ref, "quarterly statements", Mode.SPARSE) == []
    # The vector is the title's alone.
    rows = {r["source_id"]: r for r in lite_store.chunk_rows(ref.scope, ["source_id", "dense"])}
    expected = embedder.embed_documents(["Quarterly statements"])[0]
    assert np.allclose(np.asarray(rows["eu-vat"]["dense"], dtype=np.float32), expected, atol=1e-5)
    # The hit's content is still the chunk's text, and the store verifies with the keys in its hashes.
    hit = search(lite_store, embedder, ref, "reverse-charge", Mode.SPARSE)[0]
    assert hit.content == DOCS[0].text
    assert verify_collection(lite_store, ref, model=embedder.name, dim=embedder.dim).ok


def test_changing_the_content_keys_rewrites_every_chunk(lite_store, embedder):
    plain = make_ref(collection="content_keys_change")
    lite_store.drop(plain.scope)
    assert ingest_documents(lite_store, embedder, plain, DOCS, progress=False).chunks_written == 2
    assert ingest_documents(lite_store, embedder, plain, DOCS, progress=False).chunks_written == 0
    assert search(lite_store, embedder, plain, "reverse-charge", Mode.SPARSE) == []
    tagged = make_ref(collection="content_keys_change", content_keys={"index": ["title", "content", "metadata.tags"]})
    report = ingest_documents(lite_store, embedder, tagged, DOCS, progress=False)
    assert (report.chunks_written, report.chunks_unchanged) == (2, 0)
    assert [h.source_id for h in search(lite_store, embedder, tagged, "reverse-charge", Mode.SPARSE)] == ["eu-vat"]
