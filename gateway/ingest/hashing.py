"""Content hashes: the identity of what was embedded and stored, for idempotent ingest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def content_hash(*, text: str, title: str = "", metadata: Mapping[str, Any] | None = None,
                 source_url: str = "", source_path: str = "", parent_key: str = "",
                 model: str = "", image: str = "", vector: str = "", keys: str = "") -> str:
    """sha256 over every stored field of a chunk and the embedding model that indexed it.

    Any change to one of them (or a new model) changes the hash, so the chunk is rewritten;
    an unchanged chunk keeps its hash and is neither embedded nor written again.
    """
    fields = {"text": text, "title": title, "metadata": dict(metadata or {}), "source_url": source_url,
              "source_path": source_path, "parent_key": parent_key, "model": model}
    if image:
        # An image chunk's hash covers the image's own sha256; only then, so that every text
        # chunk keeps the hash it was stored with and nothing is re-embedded.
        fields["image"] = image
    if vector:
        # A chunk that brought its own vector: the vector's sha256 (storage/vectors.py), so a
        # changed vector is a change; `model` is then empty, the vector is not the gateway's.
        fields["vector"] = vector
    if keys:
        # The collection's non-default content_keys (ContentKeysConfig.tag): what was embedded and indexed.
        fields["keys"] = keys
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
