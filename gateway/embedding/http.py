"""An embedder that calls an OpenAI-compatible `/embeddings` endpoint."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np

from gateway.errors import ConfigError, UpstreamUnavailable


class OpenAIEmbedder:
    """POST {base_url}/embeddings with {"model", "input"}; vectors are L2-normalised here."""

    def __init__(self, base_url: str, model: str, dim: int, *, api_key: str | None = None,
                 timeout_s: float = 30.0, batch_size: int = 64,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"embedding URL {base_url!r} must start with http:// or https://")
        if dim <= 0:
            raise ConfigError(f"embedding dimension must be positive, got {dim}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s,
                                    transport=transport)
        self._batch_size = batch_size
        self.name = f"openai:{model}"
        self.model = model
        self.dim = dim

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start:start + self._batch_size])
            out[start:start + len(batch)] = self._call(batch)
        return out

    def embed_query(self, text: str, tenant: str = "") -> np.ndarray:
        return self._call([text])[0]

    def _call(self, texts: list[str]) -> np.ndarray:
        try:
            response = self._client.post("/embeddings", json={"model": self.model, "input": texts})
            response.raise_for_status()
            items = sorted(response.json()["data"], key=lambda item: item["index"])
            matrix = np.asarray([item["embedding"] for item in items], dtype=np.float32)
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            raise UpstreamUnavailable(f"embedding endpoint {self._client.base_url} failed: {exc}") from exc
        if matrix.shape != (len(texts), self.dim):
            raise UpstreamUnavailable(f"embedding endpoint returned shape {matrix.shape}; "
                                      f"expected ({len(texts)}, {self.dim})")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.clip(norms, 1e-12, None)
