from gateway.ingest.hashing import content_hash


def test_hash_is_stable_and_sensitive_to_every_stored_field():
    base = dict(text="t", title="a", metadata={"k": 1, "j": [1, 2]}, source_url="u", source_path="p",
                parent_key="s#p0", model="m")
    digest = content_hash(**base)
    assert digest == content_hash(**{**base, "metadata": {"j": [1, 2], "k": 1}})  # key order is irrelevant
    assert len(digest) == 64
    for field, other in [("text", "T"), ("title", "b"), ("metadata", {"k": 2}), ("source_url", "v"),
                         ("source_path", "q"), ("parent_key", "s#p1"), ("model", "other-model")]:
        assert content_hash(**{**base, field: other}) != digest, field


def test_a_documents_chunk_hashes_are_content_hash_of_each_chunk():
    import random

    from gateway.ingest.hashing import ChunkHashes

    rng = random.Random(4)
    alphabet = ["a", "Z", " ", '"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "日本", "😀", "/", "<", "\u2028"]

    def text(n: int = 12) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))

    metadatas = [{}, {"k": 1, "j": [1, 2.5, None, True]}, {"ü": {"z": "x", "a": [text()]}, "page": 3},
                 {"when": __import__("datetime").date(2026, 1, 2)}]  # default=str for what JSON has no form of
    for _ in range(300):
        shared = dict(title=text(), metadata=rng.choice(metadatas), source_url=text(), source_path=text(),
                      model=rng.choice(["", "bge-small"]), image=rng.choice(["", "ab" * 32]),
                      keys=rng.choice(["", "index=title,content;embed=content"]))
        own = dict(text=text(40), parent_key=text(), vector=rng.choice(["", "cd" * 32]))
        assert ChunkHashes(**shared)(**own) == content_hash(**shared, **own), (shared, own)
