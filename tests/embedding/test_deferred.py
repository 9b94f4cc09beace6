"""The deferred embedder: name and size known at once, the model built on first use, once."""

import numpy as np

from gateway.embedding.base import Modality, modalities_of, token_embedder
from gateway.embedding.deferred import DeferredEmbedder


class Tiny:
    name, dim = "tiny", 2

    def embed_documents(self, texts):
        return np.ones((len(texts), 2), dtype=np.float32)


def test_nothing_is_built_until_an_embedding_is_asked_for():
    built = []
    deferred = DeferredEmbedder(lambda: built.append(1) or Tiny(), "tiny", 2)
    assert (deferred.name, deferred.dim, modalities_of(deferred)) == ("tiny", 2, frozenset({Modality.TEXT}))
    assert built == [] and not deferred.loaded
    assert deferred.embed_documents(["a", "b"]).shape == (2, 2)
    deferred.embed_documents(["c"])
    assert built == [1] and deferred.loaded
    assert token_embedder(deferred) is None  # Tiny has no token vectors; asking loads nothing new
