"""The citation-ready hit and its provenance, as frozen values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class SignalScore:
    """One signal's view of a hit: its raw score (higher is better), 1-based rank, and for the dense and
    sparse signals the raw score on a 0..1 scale (`normalised_score`)."""

    signal: str
    raw: float
    rank: int
    normalized: float | None = None


def normalised_score(signal: str, raw: float, best: float) -> float | None:
    """`raw` on a 0..1 scale: cosine similarity (dense) as (1 + cos) / 2, which is absolute and compares
    across queries; BM25 (sparse) as raw / `best`, the best BM25 score of the same ranked list (BM25 has no
    upper bound, so 1 is this search's best match, not a perfect one). None for any other signal."""
    if signal == "dense":
        return min(1.0, max(0.0, (1.0 + raw) / 2.0))
    if signal == "sparse":
        return min(1.0, max(0.0, raw / best)) if best > 0 else 0.0
    return None


@dataclass(frozen=True, slots=True)
class QueryMatch:
    """A planned query that found this hit: its text, kind, the hit's rank and score there."""

    query: str
    kind: str
    rank: int
    score: float


@dataclass(frozen=True, slots=True)
class Parent:
    """The parent record a child chunk was cut from."""

    key: str
    source_id: str
    title: str | None
    content: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a hit came from and how it was scored."""

    tenant: str
    namespace: str
    collection: str
    trust_tier: str
    retriever: str
    mode: str
    route: str | None = None
    scores: tuple[SignalScore, ...] = ()
    fused_score: float | None = None
    content_hash: str = ""
    ingested_at: datetime | None = None
    updated_at: datetime | None = None
    matched_queries: tuple[str, ...] = ()
    query_matches: tuple[QueryMatch, ...] = ()
    # Set by `compress`: the content's length before it was cut to the kept sentences.
    original_chars: int | None = None
    # Set by `expand`: why a neighbour was added ("link from <id>", "similar to <id> (0.87)").
    via: str | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved chunk. `score` is always "higher is better"."""

    namespace: str
    collection: str
    source_id: str
    chunk_id: str
    content: str
    score: float
    provenance: Provenance
    metadata: Mapping[str, Any] = field(default_factory=dict)
    title: str | None = None
    source_url: str | None = None
    source_path: str | None = None
    parent_key: str | None = None
    parent: Parent | None = None
    # What the hit's vector was computed from: "text", or "image" (content is then its caption).
    modality: str = "text"

    @property
    def id(self) -> str:
        return chunk_row_id(self.namespace, self.source_id, self.chunk_id)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity used to collapse duplicates across queries; the collection is part of it, so
        two collections' chunks that share a source and chunk id are never one hit."""
        return (self.namespace, self.collection, self.source_id, self.chunk_id)

    @property
    def qualified_id(self) -> str:
        """`namespace/collection/sourceId/chunkId`: unique across every collection of a tenant
        (`id` is the row id, unique within one collection)."""
        return f"{self.namespace}/{self.collection}/{self.source_id}/{self.chunk_id}"


def passage_text(hit: Hit) -> str:
    """What a model reads of a hit: its title and content, as embedded at ingest."""
    return f"{hit.title}\n{hit.content}" if hit.title else hit.content


def with_signal(hit: Hit, signal: str, raw: float, rank: int, *, score: float | None = None) -> Hit:
    """A copy of `hit` with one more signal in its provenance (and `score`, when given).

    Signal names are unique within a provenance: a name the hit already carries (a second `score`
    reranker in a chain, a second rerank stage) gets the next free `:2`, `:3` suffix.
    """
    taken = {s.signal for s in hit.provenance.scores}
    name, n = signal, 1
    while name in taken:
        n += 1
        name = f"{signal}:{n}"
    provenance = replace(hit.provenance, scores=(*hit.provenance.scores, SignalScore(name, raw, rank)))
    return replace(hit, provenance=provenance, score=hit.score if score is None else score)


def chunk_row_id(namespace: str, source_id: str, chunk_id: str) -> str:
    return f"{namespace}/{source_id}/{chunk_id}"


def split_row_id(namespace: str, row_id: str) -> tuple[str, str]:
    """(sourceId, chunkId) of a row id `namespace/sourceId/chunkId` (chunk ids never hold a '/')."""
    source_and_chunk = row_id[len(namespace) + 1:]
    source_id, _, chunk_id = source_and_chunk.rpartition("/")
    return source_id, chunk_id
