"""What the store writes and reads back: chunk and parent records, stored chunks and scored rows."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.storage.identifiers import relative_source_path
from gateway.storage.schema import CHUNK_OUTPUT_FIELDS, MODALITY_FIELD

# What a search always returns: a hit's identity. Other stored fields only when asked for
# (each costs engine CPU per candidate; see SearchOptions.fields).
HIT_KEY_FIELDS = ("id", "tenant", "namespace", "source_id", "chunk_id")


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A child chunk as ingest writes it."""

    source_id: str
    chunk_id: str
    parent_key: str
    text: str
    title: str
    content_hash: str
    created_at: int
    updated_at: int
    dense: np.ndarray
    source_url: str = ""
    source_path: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Text the BM25 index sees before analysis (the collection's content_keys.index; default title and text).
    index_text: str = ""
    # Text the dense vector is computed from (content_keys.embed); empty: `index_text`.
    embed_text: str = ""
    # What `dense` is computed from; an image chunk carries its decoded image until it is embedded.
    modality: str = "text"
    image: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ParentRecord:
    key: str
    source_id: str
    title: str
    text: str
    content_hash: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk row as read back, without vectors."""

    namespace: str
    source_id: str
    chunk_id: str
    parent_key: str
    text: str
    title: str
    source_url: str
    source_path: str
    content_hash: str
    created_at: int
    updated_at: int
    metadata: Mapping[str, Any]
    modality: str = "text"


@dataclass(frozen=True, slots=True)
class Stored:
    """What an ingest needs to know of a stored row to decide whether to rewrite it."""

    source_id: str
    content_hash: str
    created_at: int


@dataclass(frozen=True, slots=True)
class Removed:
    """Rows one delete removed."""

    chunks: int
    parents: int


class ScoredChunk:
    """A search's row and its score. The row's stored chunk is built when first read: a fused
    search returns ten of its hundred candidates, and only those need one."""

    __slots__ = ("score", "_row", "_chunk")

    def __init__(self, row: Mapping[str, Any], score: float) -> None:
        self._row = row
        self._chunk: StoredChunk | None = None
        self.score = score

    @property
    def chunk(self) -> StoredChunk:
        if self._chunk is None:
            self._chunk = stored_chunk(self._row)
        return self._chunk

    @property
    def row_id(self) -> str:
        """The row's primary key in its physical collection."""
        return self._row["id"]

    @property
    def identity(self) -> tuple[str, str, str]:
        """(namespace, source id, chunk id): a row's identity within its collection."""
        row = self._row
        return (row["namespace"], row["source_id"], row["chunk_id"])

    @property
    def namespace(self) -> str:
        return self._row["namespace"]

    @property
    def source_id(self) -> str:
        return self._row["source_id"]

    @property
    def chunk_id(self) -> str:
        return self._row["chunk_id"]

    def __repr__(self) -> str:
        return f"ScoredChunk({self.namespace}/{self.source_id}/{self.chunk_id}, {self.score})"


def stored_metadata(value: Any) -> dict[str, Any]:
    """A row's metadata field as a dict (engines return it as JSON text or a mapping)."""
    if value is None:
        return {}
    if isinstance(value, (str, bytes)):
        return json.loads(value)
    return dict(value)


def keys_only(fields: Collection[str] | None) -> bool:
    return fields is not None and all(f in HIT_KEY_FIELDS for f in fields)


def searched_fields(fields: Collection[str] | None) -> list[str]:
    """What a search fetches: the primary key alone when only identities are asked for (each other
    field, even the short identity ones, costs milvus-lite a retrieval per candidate), else
    `output_fields`."""
    return ["id"] if keys_only(fields) else output_fields(fields)


def output_fields(fields: Collection[str] | None) -> list[str]:
    """Every chunk field (None), or a hit's identity plus the named stored fields. `modality` may be
    named too: the store adds that column for a collection that has it (`_with_modality`)."""
    if fields is None:
        return CHUNK_OUTPUT_FIELDS
    unknown = set(fields).difference(CHUNK_OUTPUT_FIELDS, (MODALITY_FIELD,))
    if unknown:
        raise ValueError(f"unknown chunk fields {sorted(unknown)}; known: {[*CHUNK_OUTPUT_FIELDS, MODALITY_FIELD]}")
    return [f for f in CHUNK_OUTPUT_FIELDS if f in HIT_KEY_FIELDS or f in fields]


def stored_chunk(row: Mapping[str, Any]) -> StoredChunk:
    """A stored chunk; a field the search did not fetch is empty (see `output_fields`)."""
    return StoredChunk(
        namespace=row["namespace"], source_id=row["source_id"], chunk_id=row["chunk_id"],
        parent_key=row.get("parent_key", ""), text=row.get("text", ""), title=row.get("title", ""),
        source_url=row.get("source_url", ""),
        source_path=relative_source_path(row.get("source_path", ""), row["source_id"]),
        content_hash=row.get("content_hash", ""), created_at=int(row.get("created_at", 0)),
        updated_at=int(row.get("updated_at", 0)), metadata=stored_metadata(row.get("metadata")),
        modality=row.get(MODALITY_FIELD) or "text")

