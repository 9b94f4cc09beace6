"""Ingest -> search on a real milvus-lite directory with the real bundled model."""

import asyncio

import numpy as np
import pytest

from gateway.errors import ConfigError, DimensionMismatch, InvalidInput
from gateway.ingest.loaders import Document
from gateway.ingest.vectors import VectorChunk
from gateway.ingest.sync import GIVEN_PER_DOCUMENT, ingest_documents
from gateway.storage.milvus import MilvusStore
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from tests.conftest import make_ref

DOCS = [
    Document("refunds", "Refunds go back to the original card within five business days. "
             "Store credit is instant.", title="Refund policy"),
    Document("outages", "When the service is down, check the status page. Incidents are posted within "
             "ten minutes.", title="Outages"),
    Document("invoices", "Invoices are emailed monthly. Download them as PDF from billing.", title="Invoices"),
]


@pytest.fixture
def ref(request, lite_store):
    ref = make_ref(collection=request.node.name[:40].lower().replace("[", "").replace("]", ""))
    lite_store.drop(ref.scope)
    return ref


def search(store, embedder, ref, text, mode=Mode.HYBRID):
    options = SearchOptions(mode=mode, limit=5, candidates=20)
    import asyncio
    return asyncio.run(CollectionRetriever(store, embedder, ref).retrieve(Query(text), options))


def test_ingest_then_search_finds_the_right_source(lite_store, embedder, ref):
    report = ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    assert (report.sources, report.chunks_written, report.parents_written) == (3, 3, 3)
    for mode in Mode:
        hits = search(lite_store, embedder, ref, "how long until my money is returned?", mode)
        if mode is Mode.SPARSE:
            hits = search(lite_store, embedder, ref, "refund card", mode)
        assert hits[0].source_id == "refunds", mode
        assert hits[0].title == "Refund policy"
        assert hits[0].provenance.content_hash


def test_reingest_unchanged_embeds_and_writes_nothing(lite_store, embedder, ref):
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    again = ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    assert (again.chunks_written, again.chunks_unchanged, again.parents_written) == (0, 3, 0)
    assert again.embed_seconds == 0.0


def test_changed_source_replaces_its_chunks_and_keeps_created_at(lite_store, embedder, ref):
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False, now_ms=1_000)
    changed = [DOCS[0], DOCS[1], Document("invoices", "Invoices now arrive weekly by post.", title="Invoices")]
    report = ingest_documents(lite_store, embedder, ref, changed, progress=False, now_ms=2_000)
    assert (report.chunks_written, report.chunks_unchanged) == (1, 2)
    [chunk] = lite_store.source_chunks(ref.scope, "invoices")
    assert chunk.text == "Invoices now arrive weekly by post."
    assert (chunk.created_at, chunk.updated_at) == (1_000, 2_000)


def test_shrinking_source_deletes_stale_chunks(lite_store, embedder, ref):
    long_doc = Document("long", " ".join(f"Paragraph sentence {i} about shipping." for i in range(120)))
    ingest_documents(lite_store, embedder, ref, [long_doc], progress=False)
    before = len(lite_store.source_chunks(ref.scope, "long"))
    assert before > 2
    report = ingest_documents(lite_store, embedder, ref, [Document("long", "Now short.")], progress=False)
    assert report.chunks_deleted == before - 1
    assert [c.text for c in lite_store.source_chunks(ref.scope, "long")] == ["Now short."]
    assert set(lite_store.parent_inventory(ref.scope)) == {"long#p0"}


def test_prune_removes_sources_missing_from_the_run(lite_store, embedder, ref):
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    without_prune = ingest_documents(lite_store, embedder, ref, DOCS[:1], progress=False)
    assert without_prune.sources_pruned == 0 and lite_store.count(ref.scope) == 3
    pruned = ingest_documents(lite_store, embedder, ref, DOCS[:1], prune=True, progress=False)
    assert pruned.sources_pruned == 2
    assert {row.source_id for row in lite_store.inventory(ref.scope).values()} == {"refunds"}


def test_prune_deletes_removed_sources_in_batches_with_their_ids_escaped(lite_store, embedder, ref, monkeypatch):
    # Quotes, backslashes and brackets in ids travel through `literal`; "a" is a prefix of kept "a+".
    gone = [f'gone {i} "quoted" \\ [x] it\'s' for i in range(30)] + ["a"]
    kept = [Document("a+", "Kept: refunds take five days."), Document('keep "me"', "Kept: outages are posted.")]
    ingest_documents(lite_store, embedder, ref, kept + [Document(g, f"Removed soon: {g}.") for g in gone],
                     progress=False)
    deletes = []
    client = lite_store._client
    real_delete = client.delete
    monkeypatch.setattr(client, "delete", lambda *a, **k: deletes.append(a[0]) or real_delete(*a, **k))
    pruned = ingest_documents(lite_store, embedder, ref, kept, prune=True, progress=False)
    assert pruned.sources_pruned == 31 and pruned.chunks_deleted == 31
    assert {row.source_id for row in lite_store.inventory(ref.scope).values()} == {"a+", 'keep "me"'}
    assert set(lite_store.parent_inventory(ref.scope)) == {"a+#p0", 'keep "me"#p0'}
    # Before: two deletes (chunks, parents) per removed source, 62 here; now one per collection.
    assert len(deletes) <= 3, deletes


def test_duplicate_source_in_one_run_is_rejected(lite_store, embedder, ref):
    with pytest.raises(InvalidInput, match="source id 'refunds' appears twice"):
        ingest_documents(lite_store, embedder, ref, [DOCS[0], DOCS[0]], progress=False)


def test_token_vectors_written_backfilled_and_pruned(ref, lite_store, embedder, tmp_path):
    from gateway.storage.token_vectors import TokenTarget, TokenVectorStore

    tokens = TokenTarget(TokenVectorStore(lite_store), 512)
    first = ingest_documents(lite_store, embedder, ref, DOCS, progress=False, tokens=tokens)
    assert first.token_vectors_written == 3 and tokens.store.count(ref.scope) == 3
    again = ingest_documents(lite_store, embedder, ref, DOCS, progress=False, tokens=tokens)
    assert again.token_vectors_written == 0 and again.chunks_written == 0
    tokens.store.delete_source(ref.scope, "invoices")  # e.g. a pipeline added after the first ingest
    backfill = ingest_documents(lite_store, embedder, ref, DOCS, progress=False, tokens=tokens)
    assert backfill.token_vectors_written == 1 and backfill.chunks_written == 0
    ingest_documents(lite_store, embedder, ref, DOCS[:1], prune=True, progress=False, tokens=tokens)
    assert tokens.store.count(ref.scope) == 1


class _Crash(BaseException):
    """A process dying mid-write: nothing in the gateway catches it, so nothing is undone."""


class _StoreThatFails(MilvusStore):
    """The real adapter on the real directory, failing at one chosen write (fault injection)."""

    def __init__(self, real: MilvusStore, at: str, error: BaseException) -> None:
        self.__dict__.update(real.__dict__)
        self._at, self._error = at, error

    def upsert_chunks(self, scope, chunks, analyzer=None, **options):
        if self._at == "chunks" and chunks:
            raise self._error
        return super().upsert_chunks(scope, chunks, analyzer, **options)

    def upsert_parents(self, scope, parents):
        if self._at == "parents" and parents:
            raise self._error
        return super().upsert_parents(scope, parents)

    def delete_parents(self, scope, keys):
        if self._at == "delete_parents":
            raise self._error
        return super().delete_parents(scope, keys)


def _orphan_parents(store, ref):
    chunks = {row.source_id for row in store.inventory(ref.scope).values()}
    return {key for key, row in store.parent_inventory(ref.scope).items() if row.source_id not in chunks}


def test_a_crash_while_writing_chunks_leaves_no_orphan_parent(lite_store, embedder, ref):
    """Parents used to be written first: a crash at the chunks left parents with no chunk."""
    with pytest.raises(_Crash):
        ingest_documents(_StoreThatFails(lite_store, "chunks", _Crash()), embedder, ref, DOCS, progress=False)
    assert lite_store.parent_inventory(ref.scope) == {}


def test_a_crash_between_chunks_and_parents_is_repaired_by_a_rerun(lite_store, embedder, ref):
    with pytest.raises(_Crash):
        ingest_documents(_StoreThatFails(lite_store, "parents", _Crash()), embedder, ref, DOCS, progress=False)
    assert len(lite_store.inventory(ref.scope)) == 3 and lite_store.parent_inventory(ref.scope) == {}
    again = ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    assert (again.chunks_written, again.parents_written) == (0, 3)
    assert _orphan_parents(lite_store, ref) == set()


def test_a_failed_write_removes_the_rows_it_created(lite_store, embedder, ref, tmp_path):
    from gateway.storage.token_vectors import TokenTarget, TokenVectorStore

    ingest_documents(lite_store, embedder, ref, DOCS[:1], progress=False)
    tokens = TokenTarget(TokenVectorStore(lite_store), 128)
    failing = _StoreThatFails(lite_store, "parents", RuntimeError("message too large"))
    with pytest.raises(RuntimeError):
        ingest_documents(failing, embedder, ref, DOCS, progress=False, tokens=tokens)
    # The two new sources are gone again, chunks and token vectors; the earlier source is intact.
    assert {row.source_id for row in lite_store.inventory(ref.scope).values()} == {"refunds"}
    assert {row.source_id for row in lite_store.parent_inventory(ref.scope).values()} == {"refunds"}
    rows = list(lite_store.inventory(ref.scope))
    assert tokens.store.present(ref.scope, [(r, "x") for r in rows], 128) == set()


def test_prune_removes_sources_that_only_have_parents_left(lite_store, embedder, ref):
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    # A delete interrupted after the chunks went: only the parents of "outages" remain.
    lite_store.delete_chunks(ref.scope, [r for r, row in lite_store.inventory(ref.scope).items()
                                         if row.source_id == "outages"])
    assert _orphan_parents(lite_store, ref) == {"outages#p0"}
    report = ingest_documents(lite_store, embedder, ref, [DOCS[0], DOCS[2]], prune=True, progress=False)
    assert report.sources_pruned == 1
    assert _orphan_parents(lite_store, ref) == set()


@pytest.mark.parametrize("source_id", ["bad\x00id", "line\nbreak", "", "x" * 513, "zero\u200bwidth"])
def test_unusable_source_ids_are_refused_before_anything_is_written(lite_store, embedder, ref, source_id):
    with pytest.raises(InvalidInput, match="sourceId"):
        ingest_documents(lite_store, embedder, ref, [Document(source_id, "text")], progress=False)
    assert lite_store.inventory(ref.scope) == {}


@pytest.mark.parametrize("metadata, message", [
    ({"n": 2**63}, "outside 64-bit range"), ({"f": float("nan")}, "allowed: finite numbers"),
    ({"s": "\ud800"}, "lone UTF-16 surrogate"),
])
def test_metadata_milvus_cannot_store_is_refused(lite_store, embedder, ref, metadata, message):
    with pytest.raises(InvalidInput, match=message):
        ingest_documents(lite_store, embedder, ref, [Document("doc", "text", metadata=metadata)], progress=False)


def test_pdf_chunks_carry_their_page_in_metadata(lite_store, embedder, ref, tmp_path):
    from gateway.ingest.loaders import load_paths
    from tests.documents import write_pdf

    write_pdf(tmp_path / "manual.pdf", ["Refunds go back to the card.", "Outages are posted on the status page."])
    ingest_documents(lite_store, embedder, ref, load_paths([tmp_path]), progress=False)
    chunks = lite_store.source_chunks(ref.scope, "manual.pdf")
    assert [(c.text, c.metadata.get("page")) for c in chunks] == [
        ("Refunds go back to the card.", 1), ("Outages are posted on the status page.", 2)]
    [hit] = search(lite_store, embedder, ref, "status page outage")[:1]
    assert (hit.source_id, hit.metadata["page"]) == ("manual.pdf", 2)


def test_the_progress_bar_shows_the_total_percent_and_time_left(lite_store, embedder, ref, capsys):
    ingest_documents(lite_store, embedder, ref, DOCS, progress=True, total=len(DOCS))
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "100%" in bar and "3/3" in bar and "<00:00" in bar  # elapsed<left


def test_the_progress_bar_counts_each_document_as_its_chunks_are_embedded(lite_store, embedder, ref, monkeypatch):
    from tqdm import tqdm

    from gateway.ingest import sync

    steps: list[int] = []

    class Recording(tqdm):
        def update(self, n=1):
            if n:
                steps.append(n)
            return super().update(n)

    monkeypatch.setattr(sync, "tqdm", Recording)
    documents = [Document(f"note-{i}", f"Note {i} about refunds, outages and invoices.") for i in range(20)]
    report = ingest_documents(lite_store, embedder, ref, documents, progress=True, total=len(documents))
    assert report.chunks_written == 20
    # Before: one step of 20 when the whole window (256 documents) was written.
    assert sum(steps) == 20 and max(steps) <= sync.EMBED_SLICE, steps


# -- images ---------------------------------------------------------------------------------

def _images():
    from tests.embedding.images import blue_square, encoded, photo_like, red_square

    return [Document("red-square.png", "A red square", title="red square", image=encoded(red_square())),
            Document("meadow.jpg", "A meadow under a blue sky", title="meadow",
                     image=encoded(photo_like(), "JPEG")),
            Document("blue-square.png", "A blue square", title="blue square", image=encoded(blue_square()))]


def test_images_ingest_into_an_image_collection_with_their_modality_and_encoder_size(lite_store, embedder):
    from gateway.embedding.colour_layout import DIM

    ref = make_ref(collection="photos_ingest", modality=["image"], image_encoder="colour-layout")
    lite_store.drop(ref.scope)
    report = ingest_documents(lite_store, embedder, ref, _images(), progress=False)
    assert (report.sources, report.chunks_written, report.parents_written) == (3, 3, 3)
    chunks = lite_store.source_chunks(ref.scope, "meadow.jpg")
    assert [(c.chunk_id, c.text, c.modality) for c in chunks] == [("0", "A meadow under a blue sky", "image")]
    described = lite_store.guard.describe_collection(lite_store.physical(ref.scope).chunks)
    dense = next(f for f in described["fields"] if f["name"] == "dense")
    assert dense["params"]["dim"] == DIM
    # Unchanged images are not embedded again; a changed image (same caption) is.
    again = ingest_documents(lite_store, embedder, ref, _images(), progress=False)
    assert (again.chunks_written, again.chunks_unchanged) == (0, 3)
    from tests.embedding.images import encoded, red_square
    changed = [Document("red-square.png", "A red square", title="red square", image=encoded(red_square(32))),
               *_images()[1:]]
    assert ingest_documents(lite_store, embedder, ref, changed, progress=False).chunks_written == 1


def test_text_and_images_go_only_where_their_modality_is_declared(lite_store, embedder):
    photos = make_ref(collection="photos_refusals", modality=["image"], image_encoder="colour-layout")
    docs = make_ref(collection="text_refusals")
    with pytest.raises(InvalidInput, match="document 'refunds' is text, and collection 'docs/photos_refusals' "
                                           "holds image only; allowed here: .jpeg, .jpg, .png files"):
        ingest_documents(lite_store, embedder, photos, DOCS[:1], progress=False)
    with pytest.raises(InvalidInput, match="document 'red-square.png' is an image, and collection "
                                           "'docs/text_refusals' holds text only; allowed here: text documents"):
        ingest_documents(lite_store, embedder, docs, _images()[:1], progress=False)
    broken = Document("broken.png", "half a file", image=_images()[0].image[:50])
    with pytest.raises(InvalidInput, match="image 'broken.png' .* could not be decoded"):
        ingest_documents(lite_store, embedder, photos, [broken], progress=False)
    assert lite_store.count(photos.scope) == 0


def test_a_collection_created_before_modality_existed_reads_as_text_and_takes_no_images(lite_store, embedder):
    from gateway.storage.schema import MODALITY_FIELD, chunk_index, chunk_schema

    ref = make_ref(collection="pre_modality")
    lite_store.drop(ref.scope)
    # The chunk schema as it was before this version: no `modality` field.
    client = lite_store.guard
    schema = chunk_schema(client, embedder.dim)
    schema.fields[:] = [f for f in schema.fields if f.name != MODALITY_FIELD]
    client.create_collection(lite_store.physical(ref.scope).chunks, schema=schema,
                             index_params=chunk_index(client, lite_store.capabilities.dense_index))
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    assert not lite_store.stores_modality(ref.scope)
    hits = search(lite_store, embedder, ref, "how long until my money is returned?")
    assert hits[0].source_id == "refunds" and {h.modality for h in hits} == {"text"}
    # The same name re-declared as an image collection cannot take image rows into the old schema.
    photos = make_ref(collection="pre_modality", modality=["image"], image_encoder="colour-layout")
    with pytest.raises(ConfigError, match="created before rows stored their modality.*a collection of a new name"):
        ingest_documents(lite_store, embedder, photos, _images()[:1], progress=False)


# -- chunks that bring their own vectors ---------------------------------------------------

class CountingEmbedder:
    """The real embedder, counting the texts it is asked to embed for documents."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.embedded = 0

    def embed_documents(self, texts):
        self.embedded += len(texts)
        return self._inner.embed_documents(texts)

    def embed_query(self, text, tenant=""):
        return self._inner.embed_query(text, tenant)


def unit(seed: int, dim: int = 384):
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def vector_doc(source_id: str, texts: list[str], seed: int, **fields) -> Document:
    return Document(source_id, "", chunks=tuple(VectorChunk(t, unit(seed + i)) for i, t in enumerate(texts)),
                    **fields)


def test_chunks_with_vectors_are_stored_as_given_and_found_by_their_vector(lite_store, embedder, ref):
    counting = CountingEmbedder(embedder)
    docs = [vector_doc("manual", ["Rotate the flux valve.", "Then reset the panel."], 10, title="Manual"),
            vector_doc("faq", ["Refunds take five days."], 20)]
    report = ingest_documents(lite_store, counting, ref, docs, progress=False)
    assert (report.chunks_written, report.parents_written, counting.embedded) == (3, 2, 0)
    [chunk, second] = lite_store.source_chunks(ref.scope, "manual")
    assert (chunk.chunk_id, chunk.text, second.chunk_id, chunk.parent_key) == ("0", "Rotate the flux valve.", "1",
                                                                                 "manual#p0")
    options = SearchOptions(mode=Mode.DENSE, limit=3, candidates=10)
    retriever = CollectionRetriever(lite_store, embedder, ref)
    hits = asyncio.run(retriever.retrieve(Query("", unit(11)), options))
    assert (hits[0].source_id, hits[0].chunk_id) == ("manual", "1")
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    # BM25 indexes the given texts: a hybrid search with words and a vector finds them too.
    hits = asyncio.run(retriever.retrieve(Query("refunds", unit(11)), SearchOptions(mode=Mode.SPARSE, limit=3)))
    assert hits[0].source_id == "faq"


def test_resent_vectors_write_nothing_and_a_changed_vector_is_a_change(lite_store, embedder, ref):
    counting = CountingEmbedder(embedder)
    docs = [vector_doc("manual", ["Rotate the flux valve.", "Then reset the panel."], 10)]
    ingest_documents(lite_store, counting, ref, docs, progress=False, now_ms=1_000)
    again = ingest_documents(lite_store, counting, ref, docs, progress=False, now_ms=2_000)
    assert (again.chunks_written, again.chunks_unchanged, again.parents_written) == (0, 2, 0)
    changed = [Document("manual", "", chunks=(docs[0].chunks[0], VectorChunk("Then reset the panel.", unit(99))))]
    report = ingest_documents(lite_store, counting, ref, changed, progress=False, now_ms=3_000)
    assert (report.chunks_written, report.chunks_unchanged, report.written) == (1, 1, [("manual", "1")])
    assert counting.embedded == 0
    # The same text without a vector is the gateway's to embed: a change too.
    text = ingest_documents(lite_store, counting, ref, [Document("manual", "Rotate the flux valve.")], progress=False)
    assert (text.chunks_written, text.chunks_deleted, counting.embedded) == (1, 1, 1)


def test_a_vector_of_another_size_is_refused_naming_both(lite_store, embedder, ref):
    doc = Document("manual", "", chunks=(VectorChunk("Rotate.", unit(1)), VectorChunk("Reset.", unit(2, dim=768))))
    with pytest.raises(DimensionMismatch, match=r"vector of document 'manual' chunk 1 has 768 dimensions; "
                                                r"collection docs/\S+ stores 384"):
        ingest_documents(lite_store, embedder, ref, [doc], progress=False)
    assert lite_store.source_chunks(ref.scope, "manual") == []


def test_an_image_collection_takes_no_client_vectors(lite_store, embedder):
    photos = make_ref(collection="photos_vectors", modality=["image"], image_encoder="colour-layout")
    with pytest.raises(InvalidInput, match=r"brings its own vectors, and collection 'docs/photos_vectors' holds "
                                           r"images.*allowed here: .*png"):
        ingest_documents(lite_store, embedder, photos, [vector_doc("v", ["a photo"], 1)], progress=False)


def test_documents_with_vectors_go_in_larger_rounds_than_documents_to_embed(lite_store, embedder, ref):
    rounds: list[int] = []
    texts = [Document(f"t{i}", f"Text number {i} about valves.") for i in range(3)]
    ingest_documents(lite_store, embedder, ref, texts, progress=False, window=2,
                     on_window=lambda report: rounds.append(report.sources))
    assert rounds == [2, 3]
    rounds.clear()
    # A round holds `window` documents to embed, or window * GIVEN_PER_DOCUMENT chunks with vectors.
    given = [vector_doc(f"v{i}", ["Rotate.", "Reset."], 10 * i) for i in range(GIVEN_PER_DOCUMENT + 1)]
    ingest_documents(lite_store, embedder, ref, given, progress=False, window=2,
                     on_window=lambda report: rounds.append(report.sources))
    assert rounds == [GIVEN_PER_DOCUMENT, GIVEN_PER_DOCUMENT + 1]


def test_a_client_vector_is_stored_unit_length_and_the_same_vector_again_is_no_change(lite_store, embedder, ref):
    raw = unit(5) * 9
    docs = [Document("s", "", chunks=(VectorChunk("Scaled.", raw),))]
    first = ingest_documents(lite_store, embedder, ref, docs, progress=False)
    again = ingest_documents(lite_store, embedder, ref, docs, progress=False)
    assert (first.chunks_written, again.chunks_written, again.chunks_unchanged) == (1, 0, 1)
    where = lite_store.physical(ref.scope)
    [row] = lite_store.guard.get(where.chunks, ids=[where.row_key("docs/s/0")], output_fields=["dense"])
    assert np.linalg.norm(np.asarray(row["dense"], dtype=np.float64)) == pytest.approx(1.0, abs=1e-5)


def test_a_write_past_the_embedded_size_limit_is_refused_naming_the_limit_and_a_server(lite_store, ref, monkeypatch):
    from gateway.errors import CollectionFull

    monkeypatch.setattr(lite_store, "max_chunks", 4)
    first = [vector_doc("a", ["One.", "Two."], 1), vector_doc("b", ["Three.", "Four."], 3)]
    assert ingest_documents(lite_store, None, ref, first, progress=False).chunks_written == 4
    more = [*first, vector_doc("c", ["Five."], 5)]
    with pytest.raises(CollectionFull, match=r"would hold 5 chunks after this write; the embedded store \(milvus-lite\) "
                                             r"takes at most 4 per collection \(GATEWAY_EMBEDDED_MAX_CHUNKS\).*Milvus "
                                             r"server"):
        ingest_documents(lite_store, None, ref, more, progress=False)
    assert len(lite_store.inventory(ref.scope)) == 4  # nothing of the refused window was written
    # Replacing a source's chunks within the limit, and unchanged sources, still go through.
    swap = [vector_doc("a", ["One."], 1), vector_doc("b", ["Three.", "Four."], 3), vector_doc("c", ["Five."], 5)]
    report = ingest_documents(lite_store, None, ref, swap, progress=False)
    assert (report.chunks_written, report.chunks_deleted, len(lite_store.inventory(ref.scope))) == (1, 1, 4)
    monkeypatch.setattr(lite_store, "max_chunks", None)  # a Milvus server: no limit
    assert ingest_documents(lite_store, None, ref, [*swap, vector_doc("d", ["Six."], 6)],
                            progress=False).chunks_written == 1


def test_a_load_past_auto_rows_builds_the_graph_index_once_after_its_last_window(lite_store, embedder, capsys,
                                                                                  monkeypatch):
    from gateway.ingest import sync
    from gateway.tenancy.config import IndexConfig

    monkeypatch.setattr(sync, "GIVEN_PER_DOCUMENT", 5)  # windows of 4 documents of 5 chunks

    ref = make_ref(collection="index_after_load", index=IndexConfig(auto_rows=40))
    lite_store.drop(ref.scope)
    docs = [vector_doc(f"d{i}", [f"chunk {i}.{j} about valves" for j in range(5)], 100 * i) for i in range(20)]
    seen = []
    report = ingest_documents(lite_store, embedder, ref, docs, progress=True, window=4, on_window=lambda r: seen.append(
        (r.chunks_written, lite_store.dense_index(ref.scope).index_type)))
    # Every window wrote with the index as it was; the 100 chunks got their HNSW index once, at the end.
    assert seen == [(20 * (n + 1), "FLAT") for n in range(5)]
    assert (report.dense_index, lite_store.dense_index(ref.scope).index_type) == ("HNSW", "HNSW")
    assert report.index_seconds > 0 and "building the HNSW index of 100 chunks" in capsys.readouterr().err
    hit = lite_store.search_dense(ref.scope, docs[7].chunks[2].vector, 1)[0]
    assert (hit.source_id, hit.chunk_id) == ("d7", "2")
    again = ingest_documents(lite_store, embedder, ref, docs, progress=False)
    assert (again.chunks_written, again.index_seconds, again.dense_index) == (0, 0.0, "")
    lite_store.drop(ref.scope)


def test_the_same_vectors_sent_as_base64_are_unchanged(lite_store, embedder, ref, tmp_path):
    import base64
    import json

    from gateway.ingest.loaders import load_paths

    rng = np.random.default_rng(4)
    lines = [{"_id": f"d{i}", "title": "Tïtle", "metadata": {"n": i},
              "chunks": [{"text": f"chunk {i}.{j} größe", "vector": [round(float(x), 6) for x in rng.standard_normal(384)]}
                         for j in range(3)]} for i in range(4)]
    as_lists, as_base64 = tmp_path / "lists.jsonl", tmp_path / "base64.jsonl"
    as_lists.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    for line in lines:
        for chunk in line["chunks"]:
            chunk["vector"] = base64.b64encode(np.asarray(chunk["vector"], "<f4").tobytes()).decode("ascii")
    as_base64.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    first = ingest_documents(lite_store, embedder, ref, load_paths([as_lists]), progress=False)
    again = ingest_documents(lite_store, embedder, ref, load_paths([as_base64]), progress=False)
    assert (first.chunks_written, again.chunks_written, again.chunks_unchanged, again.parents_written) == (12, 0, 12, 0)


def test_a_bad_vector_in_a_later_window_of_a_read_ahead_file_writes_nothing_of_that_window(
        lite_store, embedder, ref, tmp_path, monkeypatch):
    import json

    from gateway.ingest import jsonl_reader, sync
    from gateway.ingest.loaders import load_paths

    monkeypatch.setattr(sync, "GIVEN_PER_DOCUMENT", 2)  # windows of 4 documents of 2 chunks
    monkeypatch.setattr(jsonl_reader, "READ_AHEAD_BYTES", 0)  # read by the child process
    lines = [json.dumps({"_id": f"d{i}", "chunks": [{"text": f"chunk {i}.{j}", "vector": unit(10 * i + j).tolist()}
                                                    for j in range(2)]}) for i in range(12)]
    lines[9] = lines[9].replace('"vector": [', '"vector": ["x", ', 1)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    acknowledged = []
    with pytest.raises(InvalidInput, match=r"corpus.jsonl:10: vector of document 'd9' chunks\[0\] must be a list of "
                                           r"numbers"):
        ingest_documents(lite_store, embedder, ref, load_paths([corpus]), progress=False, window=4,
                         on_window=lambda r: acknowledged.append(r.chunks_written))
    assert acknowledged == [8, 16]
    assert sorted({row.source_id for row in lite_store.inventory(ref.scope).values()}) == [f"d{i}" for i in range(8)]
