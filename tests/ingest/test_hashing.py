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
