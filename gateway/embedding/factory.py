"""Build the configured embedder from settings."""

from __future__ import annotations

from gateway.embedding.base import CachedEmbedder
from gateway.errors import ConfigError
from gateway.settings import EmbedderKind, Settings


def build_embedder(settings: Settings) -> CachedEmbedder:
    if settings.embedder is EmbedderKind.BUNDLED:
        from gateway.embedding.bundled import DIM, MODEL_NAME, BundledEmbedder
        from gateway.embedding.deferred import DeferredEmbedder
        from gateway.embedding.models import ModelSource

        # Loaded on the first embedding: a load of chunks that bring their vectors never needs it.
        inner = DeferredEmbedder(lambda: BundledEmbedder(batch_size=settings.embed_batch_size,
                                                         source=ModelSource(settings.model_dir)),
                                 MODEL_NAME, DIM)
    else:
        from gateway.embedding.http import OpenAIEmbedder

        problems = embedder_problems(settings)
        if problems:
            raise ConfigError(problems[0])
        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
        inner = OpenAIEmbedder(settings.embedding_url, settings.embedding_model, settings.embedding_dim,  # type: ignore[arg-type]
                               api_key=key, timeout_s=settings.embedding_timeout_s)
    return CachedEmbedder(inner, size=settings.query_cache_size)


def embedder_problems(settings: Settings) -> list[str]:
    """What the configured embedder lacks in the settings (checked without building it): the
    bundled one's model files, missing or not their sha256 pins."""
    if settings.embedder is EmbedderKind.BUNDLED:
        from gateway.embedding.models import EMBEDDER, ModelSource

        try:
            ModelSource(settings.model_dir).verify(EMBEDDER)
        except ConfigError as exc:
            return [exc.message]
        return []
    missing = [name for name, value in (("GATEWAY_EMBEDDING_URL", settings.embedding_url),
                                        ("GATEWAY_EMBEDDING_MODEL", settings.embedding_model),
                                        ("GATEWAY_EMBEDDING_DIM", settings.embedding_dim)) if not value]
    return [f"GATEWAY_EMBEDDER=openai needs {', '.join(missing)}"] if missing else []
