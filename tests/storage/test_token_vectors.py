"""The token-vector store: hash-checked reads, per-collection files, deletes."""

import numpy as np

from gateway.storage.schema import Scope
from gateway.storage.token_vectors import TokenVectorStore, default_directory

MINE, THEIRS = Scope("acme", "docs", "guides"), Scope("globex", "docs", "guides")


def matrix(rows: int, value: float = 0.5) -> np.ndarray:
    return np.full((rows, 4), value, dtype=np.float32)


def test_round_trip_as_float16_checked_by_content_hash(tmp_path):
    store = TokenVectorStore(tmp_path)
    store.put(MINE, [("docs/a/0", "a", "h1", matrix(3)), ("docs/b/0", "b", "h2", matrix(2))], 512)
    found = store.get(MINE, [("docs/a/0", "h1"), ("docs/b/0", "stale"), ("docs/c/0", "h3")], 512)
    assert list(found) == ["docs/a/0"] and found["docs/a/0"].dtype == np.float16 and found["docs/a/0"].shape == (3, 4)
    assert store.present(MINE, [("docs/a/0", "h1"), ("docs/b/0", "old")], 512) == {"docs/a/0"}
    # Rows computed at another document length do not count.
    assert store.get(MINE, [("docs/a/0", "h1")], 256) == {} and store.present(MINE, [("docs/a/0", "h1")], 256) == set()


def test_each_tenant_collection_has_its_own_file(tmp_path):
    store = TokenVectorStore(tmp_path)
    store.put(MINE, [("docs/a/0", "a", "h1", matrix(1))], 512)
    assert store.get(THEIRS, [("docs/a/0", "h1")], 512) == {}
    assert [p.name for p in tmp_path.glob("*.sqlite")] == [f"{MINE.chunk_collection}.sqlite"]


def test_delete_by_source_and_rows_and_drop(tmp_path):
    store = TokenVectorStore(tmp_path)
    store.put(MINE, [("docs/a/0", "a", "h", matrix(1)), ("docs/a/1", "a", "h", matrix(1)), ("docs/b/0", "b", "h", matrix(1))], 512)
    store.delete_source(MINE, "a")
    assert store.count(MINE) == 1
    store.delete_rows(MINE, ["docs/b/0"])
    assert store.count(MINE) == 0
    store.drop(MINE)
    assert not list(tmp_path.glob("*.sqlite*"))
    store.delete_source(THEIRS, "a")  # nothing stored: no error, no file
    assert store.count(THEIRS) == 0 and not list(tmp_path.glob("*.sqlite*"))


def test_default_directory_sits_beside_a_lite_file():
    assert str(default_directory("./data/gateway.db")) == "data/gateway.tokens"
    assert str(default_directory("http://milvus:19530")) == "data/token-vectors"
