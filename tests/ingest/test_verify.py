"""`verify` re-reads every row: content hashes, vectors, orphans and counts against the record."""

import numpy as np
import pytest

from gateway.ingest.sync import ingest_documents
from gateway.ingest.verify import Finding, verify_collection
from gateway.runtime import open_store
from gateway.settings import Settings
from gateway.storage.record import RecordSnapshot, StorePaths
from gateway.storage.schema import CHUNK_OUTPUT_FIELDS
from gateway.storage.token_vectors import TokenTarget, TokenVectorStore
from tests.storage.test_backup import DOCS, REF


@pytest.fixture
def ingested(tmp_path, embedder):
    paths = StorePaths.of(str(tmp_path / "g.db"))
    store = open_store(Settings(milvus_uri=str(paths.store)), dim=embedder.dim)
    tokens = TokenVectorStore(store)
    ingest_documents(store, embedder, REF, DOCS, progress=False, tokens=TokenTarget(tokens, 128))
    yield store, tokens, paths
    tokens.close()
    store.close()


def _verify(store, paths, embedder, record=None):
    record = record or store.guard.record.snapshot()
    return verify_collection(store, REF, model=embedder.name, dim=embedder.dim, record=record,
                             tokens=TokenVectorStore(store))


def test_an_intact_collection_verifies_clean(ingested, embedder):
    store, _, paths = ingested
    check = _verify(store, paths, embedder)
    assert check.ok, check.summary()
    assert check.chunks == store.count(REF.scope) > 3 and check.parents >= 3 and check.token_vectors == check.chunks


def test_each_kind_of_damage_is_counted(ingested, embedder):
    store, tokens, paths = ingested
    scope = REF.scope
    first = sorted(store.inventory(scope))[0]
    row = dict(store.guard.get(scope.chunk_collection, ids=[first],
                               output_fields=[*CHUNK_OUTPUT_FIELDS, "dense", "bm25_text"])[0])
    row["text"] = row["text"] + " tampered"
    row["dense"] = (np.asarray(row["dense"], dtype=np.float32) * 5).tolist()
    store.guard.upsert(scope.chunk_collection, [row])
    store.guard.flush(scope.chunk_collection)
    store.guard.upsert(scope.parent_collection, [{
        "key": "ghost#p0", "tenant": scope.tenant, "namespace": scope.namespace, "source_id": "ghost",
        "title": "", "text": "no chunk points here", "content_hash": "x", "metadata": {}, "placeholder": [0.0, 0.0]}])
    store.guard.flush(scope.parent_collection)
    tokens.put(scope, [("docs/ghost/0", "ghost", "h", np.ones((2, 384), dtype=np.float16))], 128)

    check = _verify(store, paths, embedder)
    assert check.problems[Finding.CONTENT_HASH] == 1 and check.examples[Finding.CONTENT_HASH] == [first]
    assert check.problems[Finding.VECTOR] == 1 and "norm 5" in check.examples[Finding.VECTOR][0]
    assert check.problems[Finding.ORPHAN_PARENT] == 1 and check.problems[Finding.PARENT_HASH] == 1
    assert check.examples[Finding.ORPHAN_TOKENS] == ["docs/ghost/0"]


def test_counts_are_compared_with_the_record(ingested, embedder):
    store, _, paths = ingested
    snapshot = store.guard.record.snapshot()
    entry = snapshot.collections[REF.scope.chunk_collection]
    bigger = {**snapshot.collections,
              REF.scope.chunk_collection: type(entry)(entry.rows + 3, entry.rows + 3)}
    check = _verify(store, paths, embedder, RecordSnapshot(bigger, exists=True))
    assert check.problems == {Finding.COUNT: 1}
    assert f"record says {entry.rows + 3}" in check.examples[Finding.COUNT][0]


def test_an_image_collection_verifies_clean_against_its_own_encoder(ingested, embedder):
    from gateway.embedding.colour_layout import DIM, NAME
    from gateway.ingest.loaders import Document
    from tests.conftest import make_ref
    from tests.embedding.images import encoded, photo_like, red_square

    store, _, _ = ingested
    photos = make_ref(namespace="media", collection="photos", modality=["image"], image_encoder="colour-layout")
    ingest_documents(store, embedder, photos, [Document("red.png", "A red square", image=encoded(red_square())),
                                               Document("meadow.jpg", "A meadow", image=encoded(photo_like(), "JPEG"))],
                     progress=False)
    check = verify_collection(store, photos, model=NAME, dim=DIM, record=store.guard.record.snapshot())
    assert check.ok and check.chunks == 2, check.summary()
    # Checked against the text model's size, every image vector is wrong: the check is real.
    wrong = verify_collection(store, photos, model=embedder.name, dim=embedder.dim)
    assert not wrong.ok and f"expected ({embedder.dim},)" in str(wrong.summary())


def test_chunks_whose_parent_row_is_gone_are_counted_with_examples(ingested, embedder):
    store, _, paths = ingested
    scope = REF.scope
    parents = store.parent_inventory(scope)
    chunks = store.guard.get(scope.chunk_collection, ids=sorted(store.inventory(scope)), output_fields=["parent_key"])
    lost = sorted(parents)[0]
    orphaned = sorted(row["id"] for row in chunks if row["parent_key"] == lost)
    store.guard.delete(scope.parent_collection, ids=[lost])
    store.guard.flush(scope.parent_collection)

    check = _verify(store, paths, embedder)
    assert check.problems == {Finding.ORPHAN_CHUNK: len(orphaned)} and orphaned
    assert check.examples[Finding.ORPHAN_CHUNK] == [f"{i} (parent {lost})" for i in orphaned][:5]
    assert check.summary()["problems"] == {"chunk_without_parent": len(orphaned)}


def test_chunks_that_brought_their_own_vectors_verify_clean_and_their_damage_is_still_found(ingested, embedder):
    from gateway.ingest.loaders import Document
    from gateway.ingest.vectors import VectorChunk

    store, _, paths = ingested
    # Not unit length: cosine does not care, and the client need not normalise.
    raw = np.random.default_rng(3).standard_normal((2, embedder.dim)).astype(np.float32) * 7
    doc = Document("own", "", title="Own", chunks=(VectorChunk("Rotate the valve.", raw[0]),
                                                   VectorChunk("Reset the panel.", raw[1])))
    assert ingest_documents(store, embedder, REF, [*DOCS, doc], progress=False).chunks_written == 2
    check = _verify(store, paths, embedder)
    assert check.ok, check.summary()
    # A client chunk whose text changed on disk is still a content-hash mismatch.
    where = store.physical(REF.scope)
    [row] = store.guard.get(where.chunks, ids=[where.row_key("docs/own/0")],
                           output_fields=[*CHUNK_OUTPUT_FIELDS, "bm25_text", "dense"])
    store.guard.upsert(where.chunks, [{**row, "text": "Rotate the valve twice."}])
    store.guard.flush(where.chunks)
    damaged = _verify(store, paths, embedder)
    assert damaged.problems == {Finding.CONTENT_HASH: 1}, damaged.summary()


def test_verify_reports_its_progress_as_it_reads(ingested, embedder, monkeypatch):
    from gateway.ingest import verify

    store, _, paths = ingested
    monkeypatch.setattr(verify, "_BATCH", 2)  # a progress event every 2 rows
    heard: list[tuple[str, int]] = []
    check = verify_collection(store, REF, model=embedder.name, dim=embedder.dim,
                              on_rows=lambda step, rows: heard.append((step, rows)))
    assert check.ok
    assert [rows for step, rows in heard if step == "chunks"] == list(range(2, check.chunks + 1, 2))
    assert [rows for step, rows in heard if step == "parents"] == list(range(2, check.parents + 1, 2))
    assert heard.index(("parents", 2)) > heard.index(("chunks", 2))
