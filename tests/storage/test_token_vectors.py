"""Token vectors in a companion Milvus collection: hash-checked reads, pieces, the tenant boundary, deletes."""

import numpy as np

from gateway.ingest.sync import ingest_documents
from gateway.ingest.loaders import Document
from gateway.storage.schema import Scope
from gateway.storage.token_vectors import (PIECE_TOKENS, TokenTarget, TokenVectorStore, default_directory,
                                          token_collection)
from tests.conftest import make_ref

MINE, THEIRS = Scope("acme", "docs", "tokens"), Scope("globex", "docs", "tokens")


def matrix(rows: int, value: float = 0.5, dim: int = 4) -> np.ndarray:
    return (np.arange(rows * dim, dtype=np.float32).reshape(rows, dim) / 1000 + value)


def fresh(lite_store, cache_bytes: int = 0) -> TokenVectorStore:
    """Without the in-process cache unless asked: these tests read what the store holds."""
    tokens = TokenVectorStore(lite_store, cache_bytes=cache_bytes)
    for scope in (MINE, THEIRS):
        tokens.drop(scope)
    return tokens


def test_round_trip_as_float16_checked_by_content_hash(lite_store):
    store = fresh(lite_store)
    store.put(MINE, [("docs/a/0", "a", "h1", matrix(3)), ("docs/b/0", "b", "h2", matrix(2))], 512)
    found = store.get(MINE, [("docs/a/0", "h1"), ("docs/b/0", "stale"), ("docs/c/0", "h3")], 512)
    assert list(found) == ["docs/a/0"] and found["docs/a/0"].dtype == np.float16 and found["docs/a/0"].shape == (3, 4)
    assert np.array_equal(found["docs/a/0"], matrix(3).astype(np.float16))
    assert store.present(MINE, [("docs/a/0", "h1"), ("docs/b/0", "old")], 512) == {"docs/a/0"}
    # Rows computed at another document length do not count.
    assert store.get(MINE, [("docs/a/0", "h1")], 256) == {} and store.present(MINE, [("docs/a/0", "h1")], 256) == set()


def test_a_long_matrix_is_split_into_pieces_and_a_shorter_one_replaces_all_of_them(lite_store):
    store = fresh(lite_store)
    long = matrix(PIECE_TOKENS * 2 + 7, dim=384)
    store.put(MINE, [("docs/long/0", "long", "h1", long)], 512)
    pieces = lite_store.guard.query(token_collection(MINE), filter=lite_store.scoped(MINE, None),
                                    output_fields=["piece"], limit=100)
    assert sorted(p["piece"] for p in pieces) == [0, 1, 2]
    assert np.array_equal(store.get(MINE, [("docs/long/0", "h1")], 512)["docs/long/0"], long.astype(np.float16))
    store.put(MINE, [("docs/long/0", "long", "h2", matrix(5, dim=384))], 512)
    assert store.get(MINE, [("docs/long/0", "h2")], 512)["docs/long/0"].shape == (5, 384)
    assert store.count(MINE) == 1 and store.get(MINE, [("docs/long/0", "h1")], 512) == {}


def test_one_tenant_never_reads_another_tenants_rows(lite_store):
    store = fresh(lite_store)
    store.put(MINE, [("docs/a/0", "a", "h1", matrix(1))], 512)
    assert store.get(THEIRS, [("docs/a/0", "h1")], 512) == {}
    assert token_collection(MINE) != token_collection(THEIRS)


def test_delete_by_source_and_rows_and_drop(lite_store):
    store = fresh(lite_store)
    store.put(MINE, [("docs/a/0", "a", "h", matrix(1)), ("docs/a/1", "a", "h", matrix(1)),
                     ("docs/b/0", "b", "h", matrix(1))], 512)
    store.delete_source(MINE, "a")
    assert store.count(MINE) == 1 and store.row_ids(MINE) == ["docs/b/0"]
    store.delete_rows(MINE, ["docs/b/0"])
    assert store.count(MINE) == 0
    store.drop(MINE)
    assert not lite_store.guard.has_collection(token_collection(MINE))
    store.delete_source(THEIRS, "a")  # nothing stored: no error, no collection created
    assert store.count(THEIRS) == 0 and not lite_store.guard.has_collection(token_collection(THEIRS))


def _remove_behind_its_back(lite_store, scope: Scope) -> None:
    """Delete the scope's stored pieces through the store itself, not through TokenVectorStore."""
    lite_store.guard.delete(token_collection(scope), filter=lite_store.scoped(scope, None))
    lite_store.guard.flush(token_collection(scope))


def test_matrices_read_or_written_are_kept_so_the_next_read_needs_no_store(lite_store):
    store = fresh(lite_store, cache_bytes=1 << 20)
    store.put(MINE, [("docs/a/0", "a", "h1", matrix(3))], 512)
    store.put(THEIRS, [("docs/x/0", "x", "hx", matrix(2))], 512)
    store.cache.forget(THEIRS)
    assert set(store.get(THEIRS, [("docs/x/0", "hx")], 512)) == {"docs/x/0"}  # read from the store, then kept
    for scope in (MINE, THEIRS):
        _remove_behind_its_back(lite_store, scope)
    mine = store.get(MINE, [("docs/a/0", "h1")], 512)["docs/a/0"]
    assert np.array_equal(mine, matrix(3).astype(np.float16)) and not mine.flags.writeable
    assert set(store.get(THEIRS, [("docs/x/0", "hx")], 512)) == {"docs/x/0"}
    # Keyed by the content hash and token limit, and by tenant: another tenant's identical key misses.
    assert store.get(MINE, [("docs/a/0", "h2")], 512) == {} and store.get(MINE, [("docs/a/0", "h1")], 256) == {}
    assert store.get(Scope("globex", "docs", "tokens"), [("docs/a/0", "h1")], 512) == {}
    # A delete through the store forgets the scope's kept matrices, and only that scope's.
    store.delete_source(MINE, "a")
    assert store.get(MINE, [("docs/a/0", "h1")], 512) == {}
    assert set(store.get(THEIRS, [("docs/x/0", "hx")], 512)) == {"docs/x/0"}
    store.drop(THEIRS)
    assert store.get(THEIRS, [("docs/x/0", "hx")], 512) == {} and len(store.cache) == 0


def test_ingest_writes_them_to_milvus_and_deleting_the_source_removes_them(lite_store, embedder):
    ref = make_ref("acme", "docs", "tokingest")
    lite_store.drop(ref.scope)
    tokens = fresh(lite_store)
    tokens.drop(ref.scope)
    docs = [Document("cats", "Cats purr and hunt mice.", title="Cats"),
            Document("tea", "Green tea is brewed from unoxidised leaves.", title="Tea")]
    report = ingest_documents(lite_store, embedder, ref, docs, progress=False, tokens=TokenTarget(tokens, 512))
    assert report.token_vectors_written == 2 and tokens.count(ref.scope) == 2
    ingest_documents(lite_store, embedder, ref, docs[:1], prune=True, progress=False, tokens=TokenTarget(tokens, 512))
    assert tokens.row_ids(ref.scope) == sorted(lite_store.inventory(ref.scope))


def test_default_directory_names_where_older_versions_kept_them():
    assert str(default_directory("./data/gateway.db")) == "data/gateway.tokens"
    assert str(default_directory("http://milvus:19530")) == "data/token-vectors"
