"""Build the configured embedder from settings."""

from __future__ import annotations

from gateway.embedding.base import CachedEmbedder
from gateway.errors import ConfigError
from gateway.settings import EmbedderKind, Settings


def build_embedder(settings: Settings) -> CachedEmbedder:
    if settings.embedder is EmbedderKind.BUNDLED:
        from gateway.embedding.bundled import BundledEmbedder
        from gateway.embedding.models import ModelSource

        inner = BundledEmbedder(batch_size=settings.embed_batch_size, source=ModelSource(settings.model_dir))
    else:
        from gateway.embedding.http import OpenAIEmbedder

        missing = [name for name, value in (("GATEWAY_EMBEDDING_URL", settings.embedding_url),
                                            ("GATEWAY_EMBEDDING_MODEL", settings.embedding_model),
                                            ("GATEWAY_EMBEDDING_DIM", settings.embedding_dim)) if not value]
        if missing:
            raise ConfigError(f"GATEWAY_EMBEDDER=openai needs {', '.join(missing)}")
        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
        inner = OpenAIEmbedder(settings.embedding_url, settings.embedding_model, settings.embedding_dim,  # type: ignore[arg-type]
                               api_key=key, timeout_s=settings.embedding_timeout_s)
    return CachedEmbedder(inner, size=settings.query_cache_size)
