import asyncio

import pytest

from gateway.errors import InvalidFilter, ModeNotSupported
from gateway.ingest.loaders import Document
from gateway.ingest.sync import ingest_documents
from gateway.retrieval.options import Fusion, Mode, Query, SearchOptions
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.storage.filters import Condition, Op
from tests.conftest import make_ref

DOCS = [
    Document("gpu", "Training on a GPU requires CUDA drivers and enough device memory.", title="GPUs",
             metadata={"year": 2021, "lang": "en"}),
    Document("cpu", "Inference on a CPU benefits from int8 quantisation and batching.", title="CPUs",
             metadata={"year": 2023, "lang": "en"}),
    Document("tpu", "Le TPU exécute des multiplications de matrices très rapidement.", title="TPUs",
             metadata={"year": 2023, "lang": "fr"}),
]


@pytest.fixture(scope="module")
def ref(lite_store, embedder):
    ref = make_ref(collection="retrievers", metadata_fields=("year", "lang"))
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, DOCS, progress=False)
    return ref


def run(retriever, text, **options):
    options = SearchOptions(**{"mode": Mode.HYBRID, "limit": 5, "candidates": 10, **options})
    return asyncio.run(retriever.retrieve(Query(text), options))


def test_hybrid_hits_carry_both_signals_and_provenance(lite_store, embedder, ref):
    hits = run(CollectionRetriever(lite_store, embedder, ref, route="explicit"), "quantised CPU inference")
    top = hits[0]
    assert top.source_id == "cpu"
    assert {s.signal for s in top.provenance.scores} == {"dense", "sparse"}
    assert top.provenance.fused_score == top.score
    assert (top.provenance.tenant, top.provenance.trust_tier, top.provenance.route) == ("acme", "first-party", "explicit")
    assert top.provenance.ingested_at is not None


@pytest.mark.parametrize("fusion", list(Fusion))
def test_every_fusion_ranks_scores_descending(lite_store, embedder, ref, fusion):
    hits = run(CollectionRetriever(lite_store, embedder, ref), "GPU memory", fusion=fusion, alpha=0.5)
    assert hits[0].source_id == "gpu"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_metadata_filter_and_threshold(lite_store, embedder, ref):
    retriever = CollectionRetriever(lite_store, embedder, ref)
    hits = run(retriever, "matrix multiplication hardware",
               filter=Condition("metadata.lang", Op.EQ, "en"), mode=Mode.DENSE)
    assert {h.source_id for h in hits} == {"gpu", "cpu"}
    high = run(retriever, "GPU memory", mode=Mode.DENSE, threshold=0.99)
    assert high == []


def test_undeclared_metadata_key_is_an_invalid_filter(lite_store, embedder, ref):
    with pytest.raises(InvalidFilter, match="'metadata.author' is not filterable here; allowed: .*metadata.lang"):
        run(CollectionRetriever(lite_store, embedder, ref), "x", filter=Condition("metadata.author", Op.EQ, "me"))


@pytest.mark.parametrize("mode", [Mode.DENSE, Mode.HYBRID])
def test_modes_needing_an_embedder_fail_loudly_without_one(lite_store, ref, mode):
    with pytest.raises(ModeNotSupported, match=f"mode '{mode.value}' needs an embedder.*supported here: sparse"):
        run(CollectionRetriever(lite_store, None, ref), "GPU", mode=mode)
    assert run(CollectionRetriever(lite_store, None, ref), "GPU", mode=Mode.SPARSE)[0].source_id == "gpu"


def test_a_hybrid_query_of_stop_words_runs_dense_and_says_so(lite_store, embedder, ref):
    retriever = CollectionRetriever(lite_store, embedder, ref)
    options = SearchOptions(mode=Mode.HYBRID, limit=5, candidates=10)
    hits = run(retriever, "what is the of it")
    assert hits and {s.signal for h in hits for s in h.provenance.scores} == {"dense"}
    assert {h.provenance.mode for h in hits} == {"dense"}
    assert retriever.effective_mode(Query("what is the of it"), options) is Mode.DENSE
    [notice] = retriever.notices(Query("what is the of it"), options)
    assert "hybrid search ran dense only" in notice and "no BM25 terms" in notice
    assert retriever.notices(Query("CPU inference"), options) == ()
    sparse = SearchOptions(mode=Mode.SPARSE, limit=5)
    assert run(retriever, "what is the of it", mode=Mode.SPARSE) == []
    assert "sparse search found nothing" in retriever.notices(Query("the of"), sparse)[0]


def test_fusion_and_alpha_for_a_one_signal_search_are_reported_as_ignored():
    from gateway.retrieval.options import ignored_parameters
    assert ignored_parameters(Mode.HYBRID, Fusion.RRF, 0.3) == ()
    assert ignored_parameters(Mode.DENSE, None, None) == ()
    notices = ignored_parameters(Mode.SPARSE, Fusion.DBSF, 0.3)
    assert notices == ("fusion 'dbsf' ignored: it applies to mode 'hybrid' only, and this search ran mode 'sparse'",
                       "alpha 0.3 ignored: it applies to mode 'hybrid' only, and this search ran mode 'sparse'")


TOPICS = ["GPU memory", "CPU batching", "disk latency", "network bandwidth", "cache misses", "thread pools"]


@pytest.fixture(scope="module")
def wide_ref(lite_store, embedder):
    """Enough overlapping documents that the dense and sparse candidates differ and ties occur."""
    ref = make_ref(collection="retrievers_wide")
    lite_store.drop(ref.scope)
    docs = [Document(f"d{i}", f"Notes {i} on {TOPICS[i % 6]} and {TOPICS[(i * 5) % 6]}. " * (1 + i % 3),
                     title=f"Note {i}") for i in range(30)]
    ingest_documents(lite_store, embedder, ref, docs, progress=False)
    return ref


@pytest.mark.parametrize("fusion", list(Fusion))
@pytest.mark.parametrize("group_by_source", [False, True])
@pytest.mark.parametrize("alpha", [None, 0.3])
def test_fusing_ids_and_scores_returns_what_fusing_hits_does(lite_store, embedder, wide_ref, fusion,
                                                            group_by_source, alpha):
    # `retrieve` fuses candidates on ids and scores and builds only the hits it returns; the hits
    # must be exactly those of fusing every candidate as a hit (`combine` over `signal_lists`).
    from gateway.retrieval.retrievers import combine
    retriever = CollectionRetriever(lite_store, embedder, wide_ref)
    options = SearchOptions(mode=Mode.HYBRID, limit=7, candidates=20, fusion=fusion, alpha=alpha,
                            group_by_source=group_by_source)
    for text in ["GPU memory batching", "latency of the network", "notes"]:
        fast = asyncio.run(retriever.retrieve(Query(text), options))
        full = combine(asyncio.run(retriever.signal_lists(Query(text), options)), options)
        assert len(fast) == 7
        assert fast == full


class _Spy:
    """The real store, recording the fields each search fetched and the rows each fill fetched."""

    def __init__(self, store):
        self._store, self.searched, self.filled = store, [], []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def search_dense(self, scope, vector, limit, where=None, fields=None):
        self.searched.append(fields)
        return self._store.search_dense(scope, vector, limit, where, fields)

    def search_sparse(self, scope, text, limit, where=None, fields=None, analyzer=None):
        self.searched.append(fields)
        return self._store.search_sparse(scope, text, limit, where, fields, analyzer)

    def sparse_later(self, scope, text, limit, where=None, fields=None, analyzer=None):
        self.searched.append(fields)
        return self._store.sparse_later(scope, text, limit, where, fields, analyzer)

    def fill(self, scope, rows, fields=None):
        self.filled.append((len(rows), fields))
        return self._store.fill(scope, rows, fields)


@pytest.mark.parametrize("mode", [Mode.HYBRID, Mode.DENSE, Mode.SPARSE])
@pytest.mark.parametrize("fields", [None, frozenset({"text", "title"})])
def test_searches_rank_identities_and_only_the_returned_rows_are_filled(lite_store, embedder, wide_ref, mode, fields):
    spy = _Spy(lite_store)
    options = SearchOptions(mode=mode, limit=5, candidates=20, fields=fields)
    hits = asyncio.run(CollectionRetriever(spy, embedder, wide_ref).retrieve(Query("GPU memory batching"), options))
    assert spy.searched and all(searched == frozenset() for searched in spy.searched)
    assert spy.filled == [(5, fields)]
    # The same hits, with the same stored fields, as searches that fetch them for every candidate.
    direct = asyncio.run(CollectionRetriever(lite_store, embedder, wide_ref).signal_lists(Query("GPU memory batching"),
                                                                                      options))
    from gateway.retrieval.retrievers import combine
    assert hits == combine(direct, options)
    assert all(hit.content and (fields is not None or hit.provenance.content_hash) for hit in hits)


def test_nothing_is_filled_when_only_identities_are_read_or_every_candidate_is_returned(lite_store, embedder, wide_ref):
    spy = _Spy(lite_store)
    retriever = CollectionRetriever(spy, embedder, wide_ref)
    asyncio.run(retriever.retrieve(Query("GPU memory"), SearchOptions(mode=Mode.HYBRID, limit=5, candidates=20,
                                                                      fields=frozenset())))
    asyncio.run(retriever.retrieve(Query("GPU memory"), SearchOptions(mode=Mode.DENSE, limit=5, candidates=5)))
    assert spy.filled == []
    assert spy.searched == [frozenset(), frozenset(), None]


# -- modality -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def photos(lite_store, embedder):
    from tests.embedding.images import blue_square, encoded, photo_like, red_logo_on_white, red_square

    ref = make_ref(namespace="media", collection="photos", modality=["image"], image_encoder="colour-layout")
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, [
        Document("red-square.png", "A red square", image=encoded(red_square())),
        Document("blue-square.png", "A blue square", image=encoded(blue_square())),
        Document("meadow.jpg", "A meadow", image=encoded(photo_like(), "JPEG")),
        Document("logo.png", "Our red logo on white", image=encoded(red_logo_on_white())),
    ], progress=False)
    return ref


def by_image(retriever, image, mode=Mode.DENSE):
    options = SearchOptions(mode=mode, limit=4, candidates=10)
    return asyncio.run(retriever.retrieve(Query("photo", image=image), options))


def test_an_image_query_finds_the_nearest_images_with_their_modality(lite_store, embedder, photos):
    from gateway.embedding.images import open_image
    from tests.embedding.images import encoded, photo_like, red_logo_on_white

    retriever = CollectionRetriever(lite_store, embedder, photos)
    hits = by_image(retriever, open_image(encoded(photo_like(80, seed=5), "JPEG", quality=70)))
    assert hits[0].source_id == "meadow.jpg" and hits[0].content == "A meadow"
    assert {h.modality for h in hits} == {"image"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert by_image(retriever, open_image(encoded(red_logo_on_white(100))))[0].source_id == "logo.png"


def test_queries_of_a_modality_the_collection_cannot_embed_are_refused(lite_store, embedder, photos, ref):
    from gateway.embedding.images import open_image
    from tests.embedding.images import encoded, red_square

    image = open_image(encoded(red_square()))
    with pytest.raises(ModeNotSupported, match="a text query cannot search collection 'media/photos'"):
        run(CollectionRetriever(lite_store, embedder, photos), "a red square", mode=Mode.DENSE)
    with pytest.raises(ModeNotSupported, match="mode 'sparse' matches words, and collection 'media/photos' "
                                               "holds images .* supported here: dense"):
        by_image(CollectionRetriever(lite_store, embedder, photos), image, mode=Mode.SPARSE)
    # On a text collection an image query is refused in every mode; never run as a search of its label.
    for mode in Mode:
        with pytest.raises(ModeNotSupported, match="an image query cannot search collection 'docs/retrievers'"):
            by_image(CollectionRetriever(lite_store, embedder, ref), image, mode=mode)


def test_trust_by_gives_each_hit_the_tier_of_its_metadata(lite_store, embedder):
    ref = make_ref(collection="trusted", trust_tier="partner",
                   trust_by={"field": "origin", "tiers": {"forum": "user-generated"}})
    lite_store.drop(ref.scope)
    ingest_documents(lite_store, embedder, ref, [
        Document("manual", "Rotate the API key from the security settings page.", metadata={"origin": "vendor"}),
        Document("thread", "I rotated my API key from the settings page too.", metadata={"origin": "forum"})],
        progress=False)
    retriever = CollectionRetriever(lite_store, embedder, ref)
    expected = {"manual": "partner", "thread": "user-generated"}
    # Every stored field, and only the text: the tier is read from the metadata even when the caller
    # reads none (the rows are then filled after ranking, with the metadata).
    for fields in (None, frozenset({"text"})):
        hits = run(retriever, "rotate API key settings", fields=fields, limit=1, candidates=10)
        hits += run(retriever, "rotated my key forum", fields=fields, limit=2, candidates=10)
        assert {h.source_id: h.provenance.trust_tier for h in hits} == expected
    # A federated search's identities-only rows, filled after the merge.
    options = SearchOptions(mode=Mode.SPARSE, limit=5, fields=frozenset())
    bare = asyncio.run(retriever.signal_lists(Query("API key"), options))["sparse"]
    filled = asyncio.run(retriever.fill(bare, frozenset({"text"})))
    assert {h.source_id: h.provenance.trust_tier for h in filled} == expected


def test_normalised_scores_put_cosine_and_bm25_on_0_to_1_beside_the_raw_ones():
    from gateway.retrieval.hit import normalised_score

    assert [normalised_score("dense", c, 0.0) for c in (-1.0, 0.0, 0.5, 1.0)] == [0.0, 0.5, 0.75, 1.0]
    assert normalised_score("sparse", 3.0, 12.0) == 0.25 and normalised_score("sparse", 12.0, 12.0) == 1.0
    assert normalised_score("sparse", 0.0, 0.0) == 0.0  # nothing matched: no best to divide by
    assert normalised_score("rerank:score", 7.0, 7.0) is None and normalised_score("memory", 0.3, 1.0) is None


@pytest.mark.parametrize("mode", list(Mode))
def test_every_mode_gives_its_signals_normalised_scores(lite_store, embedder, ref, mode):
    hits = run(CollectionRetriever(lite_store, embedder, ref), "GPU memory CUDA", mode=mode, limit=3)
    signals = [s for h in hits for s in h.provenance.scores]
    assert signals and all(0.0 <= s.normalized <= 1.0 for s in signals)
    for s in signals:
        if s.signal == "dense":
            assert s.normalized == pytest.approx((1 + s.raw) / 2)
    sparse = sorted((s for s in signals if s.signal == "sparse"), key=lambda s: s.rank)
    if mode is not Mode.DENSE:
        assert sparse[0].rank == 1 and sparse[0].normalized == 1.0  # the list's best BM25 match
        assert all(s.normalized == pytest.approx(s.raw / sparse[0].raw) for s in sparse)


def test_a_process_that_only_searches_uses_the_collections_index_settings(tmp_path, embedder):
    """A reader never ran `ensure` with the tenant file's `index:`, and searched HNSW at the default ef 64
    whatever the file said; the retriever now tells the store the collection's settings."""
    from gateway.storage.milvus import MilvusStore
    from gateway.tenancy.config import IndexConfig

    ref = make_ref(collection="tuned", index=IndexConfig(dense="hnsw", ef=256))
    reader = MilvusStore(str(tmp_path / "g.db"))
    name = reader.physical(ref.scope).chunks
    assert reader.dense_search_params(name, 10)["ef"] == 64
    CollectionRetriever(reader, embedder, ref)
    assert reader.dense_search_params(name, 10)["ef"] == 256
    reader.close()
