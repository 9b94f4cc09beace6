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
    return hashlib.sha256(_CANONICAL.encode(fields).encode("utf-8")).hexdigest()


# json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str), whose
# every call builds this encoder anew: a third of a hash's time.
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


class ChunkHashes:
    """`content_hash` of the chunks of one document: the fields they share are encoded once, and each
    chunk's hash encodes only its own text, parent key and vector digest (the same digest, a fifth of
    the cost: a bulk load hashes every chunk).

    >>> hashes = ChunkHashes(title="T", metadata={"a": 1})
    >>> hashes(text="x", parent_key="d#p0") == content_hash(text="x", title="T", metadata={"a": 1}, parent_key="d#p0")
    True
    """

    def __init__(self, *, title: str = "", metadata: Mapping[str, Any] | None = None, source_url: str = "",
                 source_path: str = "", model: str = "", image: str = "", keys: str = "") -> None:
        shared: dict[str, Any] = {"metadata": dict(metadata or {}), "model": model}
        if image:
            shared["image"] = image
        if keys:
            shared["keys"] = keys
        # content_hash's JSON, keys sorted: image, keys, metadata, model | parent_key | source_path,
        # source_url | text | title | vector. The shared parts are that JSON without its braces.
        self._head = _members(shared) + ',"parent_key":'
        self._middle = "," + _members({"source_path": source_path, "source_url": source_url}) + ',"text":'
        self._tail = ',"title":' + _encode(title)

    def __call__(self, *, text: str, parent_key: str, vector: str = "") -> str:
        canonical = ("{" + self._head + _encode(parent_key) + self._middle + _encode(text) + self._tail
                     + (',"vector":' + _encode(vector) if vector else "") + "}")
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _members(fields: Mapping[str, Any]) -> str:
    return _CANONICAL.encode(fields)[1:-1]


# The string encoder json.dumps(..., ensure_ascii=False) uses for every string (C, when available).
_encode = json.encoder.encode_basestring  # type: ignore[attr-defined]
