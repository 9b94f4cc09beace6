"""Embedders: the bundled offline MiniLM model and an OpenAI-compatible HTTP client."""
