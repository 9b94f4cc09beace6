"""The Embedder protocol and a query-embedding LRU cache, keyed per tenant.

Every cache of query-derived values is keyed by (tenant, text): a cache shared across tenants
is a timing side channel (a hit is ~10x faster than a miss, so one tenant could tell which
queries another tenant ran recently).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np


class Modality(StrEnum):
    """What a vector was computed from: a collection declares the modalities it holds, each row
    stores its own, and a query is one of them."""

    TEXT = "text"
    IMAGE = "image"


@runtime_checkable
class Embedder(Protocol):
    """Turns text into L2-normalised dense vectors (rows of a float32 matrix)."""

    name: str
    dim: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str, tenant: str = "") -> np.ndarray:
        """`tenant` scopes any cache the embedder keeps; the vector does not depend on it."""
        ...


@runtime_checkable
class ImageEmbedder(Protocol):
    """Turns decoded images (RGB PIL images) into L2-normalised dense vectors.

    `modalities` is every modality the encoder maps into its one vector space: {image} for an
    image-only encoder, {text, image} for a CLIP-style one, whose text side is then its
    `embed_query`/`embed_documents`. Only a space holding both can answer a text query with
    images or an image query with text.
    """

    name: str
    dim: int
    modalities: frozenset[Modality]

    def embed_images(self, images: Sequence[object]) -> np.ndarray: ...


def modalities_of(embedder: object) -> frozenset[Modality]:
    """The modalities an embedder maps into its space; a text embedder need not say."""
    inner = getattr(embedder, "inner", embedder)
    return getattr(inner, "modalities", frozenset({Modality.TEXT}))


class TokenEmbedder(Protocol):
    """An embedder that also gives contextual token vectors (for late-interaction reranking)."""

    def token_vectors(self, text: str, tenant: str = "") -> np.ndarray: ...

    def embed_documents_with_tokens(self, texts: Sequence[str], tokens: bool = True,
                                    token_limit: int = 512) -> tuple[np.ndarray, list[np.ndarray]]: ...

    def document_token_vectors(self, texts: Sequence[str], token_limit: int = 512) -> list[np.ndarray]: ...


def token_embedder(embedder: object) -> TokenEmbedder | None:
    """The embedder's token-vector side, when it has one (the bundled MiniLM does)."""
    inner = getattr(embedder, "inner", embedder)
    needed = ("embed_documents_with_tokens", "document_token_vectors", "token_vectors")
    return inner if all(hasattr(inner, name) for name in needed) else None  # type: ignore[return-value]


class CachedEmbedder:
    """Wraps an embedder with an LRU cache of query vectors per (tenant, text); documents are not cached."""

    def __init__(self, inner: Embedder, size: int = 4096) -> None:
        self._inner = inner
        self._size = size
        self._cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
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

    def embed_query(self, text: str, tenant: str = "") -> np.ndarray:
        key = (tenant, text)
        with self._lock:
            vector = self._cache.get(key)
            if vector is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return vector
        vector = self._inner.embed_query(text, tenant)
        vector.setflags(write=False)
        with self._lock:
            self.misses += 1
            if self._size:
                self._cache[key] = vector
                if len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        return vector
