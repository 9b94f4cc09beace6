"""An embedder built on its first use: its name and vector size are known before it loads.

Loading the bundled model costs about 1.5 s and needs its files; a bulk load whose chunks all
bring their vectors (`gateway ingest` of a JSONL of vectors) never embeds, so it never loads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gateway.embedding.base import Embedder, Modality


class DeferredEmbedder:
    """Forwards everything to the embedder `build` returns, calling `build` once, on the first use."""

    def __init__(self, build: Callable[[], Embedder], name: str, dim: int,
                 modalities: frozenset[Modality] = frozenset({Modality.TEXT})) -> None:
        self.name = name
        self.dim = dim
        # Asked by ingest before anything is embedded (embedding.base.modalities_of): known here.
        self.modalities = modalities
        self._build = build
        self._built: Embedder | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._built is not None

    def _embedder(self) -> Embedder:
        if self._built is None:
            with self._lock:
                if self._built is None:
                    built = self._build()
                    if (built.name, built.dim) != (self.name, self.dim):
                        raise ValueError(f"deferred embedder announced {self.name!r} ({self.dim}-d) "
                                         f"but built {built.name!r} ({built.dim}-d)")
                    self._built = built
        return self._built

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "inner":  # `inner` is asked of wrappers (embedding.base): not one
            raise AttributeError(name)
        return getattr(self._embedder(), name)
