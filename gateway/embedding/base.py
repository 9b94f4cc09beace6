"""The Embedder protocol and a query-embedding LRU cache."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns text into L2-normalised dense vectors (rows of a float32 matrix)."""

    name: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


class TokenEmbedder(Protocol):
    """An embedder that also gives contextual token vectors (for late-interaction reranking)."""

    def token_vectors(self, text: str) -> np.ndarray: ...

    def embed_documents_with_tokens(self, texts: Sequence[str], tokens: bool = True,
                                    token_limit: int = 512) -> tuple[np.ndarray, list[np.ndarray]]: ...

    def document_token_vectors(self, texts: Sequence[str], token_limit: int = 512) -> list[np.ndarray]: ...


def token_embedder(embedder: object) -> TokenEmbedder | None:
    """The embedder's token-vector side, when it has one (the bundled MiniLM does)."""
    inner = getattr(embedder, "inner", embedder)
    needed = ("embed_documents_with_tokens", "document_token_vectors", "token_vectors")
    return inner if all(hasattr(inner, name) for name in needed) else None  # type: ignore[return-value]


class CachedEmbedder:
    """Wraps an embedder with an LRU cache of query vectors (documents are not cached)."""

    def __init__(self, inner: Embedder, size: int = 4096) -> None:
        self._inner = inner
        self._size = size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.name = inner.name
        self.dim = inner.dim
        self.hits = 0
        self.misses = 0

    @property
    def inner(self) -> Embedder:
        return self._inner

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            vector = self._cache.get(text)
            if vector is not None:
                self._cache.move_to_end(text)
                self.hits += 1
                return vector
        vector = self._inner.embed_query(text)
        vector.setflags(write=False)
        with self._lock:
            self.misses += 1
            if self._size:
                self._cache[text] = vector
                if len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        return vector
