"""Custom retrievers: a collection whose hits come from a tenant's own Python function, not Milvus.

A collection names `retriever: module:function` in its tenant file. The function takes one
`RetrieverRequest` and returns chunks (`RetrievedChunk`, a mapping with the same keys, or `Hit`),
sync or async. A search's filter (the request's, ANDed with the collection's `search.filter`)
reaches the function as `request.filter`, checked like a Milvus collection's and also compiled to
the expression Milvus would run (`request.where`); applying it is the function's job. The gateway, not the function, decides whose hits they are: every hit is stamped
with the calling tenant, the collection's namespace and name, its trust tier and the route, and
then goes through the same pipeline, trace and provenance as a Milvus hit.

Isolation policy: a chunk that claims another tenant, namespace or collection (a `Hit`, or a
mapping with `tenant`/`namespace`/`collection` keys naming something else) is dropped, never
served, and the search's trace warns with the count. A function that raises, or returns something
that is not chunks, fails the collection with UPSTREAM_UNAVAILABLE (in a federated search it is
left out and reported, like a failed Milvus collection); a GatewayError it raises keeps its code.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.admission.scheduler import offload
from gateway.entry_points import load_entry_point
from gateway.embedding.modal import ModalityNotSupported
from gateway.errors import GatewayError, InvalidInput, UpstreamUnavailable
from gateway.ingest.hashing import content_hash
from gateway.retrieval.hit import Hit, Provenance, SignalScore
from gateway.retrieval.options import Mode, Query, SearchOptions
from gateway.retrieval.retrievers import combine
from gateway.storage.filters import FilterNode, compile_filter
from gateway.tenancy.registry import CollectionRef

log = logging.getLogger("gateway.retrieval.custom")


@dataclass(frozen=True, slots=True)
class RetrieverRequest:
    """What a custom retriever is asked: the query, how many hits, whose collection it serves, and
    the filter its hits must pass (None: none).

    `filter` is a tree of `Condition(field, op, value)`, `And`, `Or` and `Not` (gateway.storage.filters);
    `where` is the same filter as the Milvus expression the gateway would have run.
    """

    query: str
    limit: int
    mode: str
    tenant: str
    namespace: str
    collection: str
    filter: FilterNode | None = None
    where: str | None = None


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    """One result of a custom retriever; `score` is "higher is better".

    `tenant`, `namespace` and `collection` are optional claims: left out, the gateway fills them
    in; set to anything but the calling collection's, the chunk is dropped.
    """

    source_id: str
    chunk_id: str
    content: str
    score: float
    title: str | None = None
    source_url: str | None = None
    source_path: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tenant: str | None = None
    namespace: str | None = None
    collection: str | None = None


_FIELDS = frozenset(RetrievedChunk.__dataclass_fields__)


def load_retriever(spec: str, where: str) -> Callable[..., Any]:
    """Import and signature-check a retriever at start-up (and in `gateway check-config`)."""
    return load_entry_point(spec, where, ("request",), "(request)")


class CustomRetriever:
    """A collection served by a tenant's function; the same seams as CollectionRetriever."""

    def __init__(self, function: Callable[..., Any], spec: str, ref: CollectionRef, route: str | None = None) -> None:
        self._function = function
        self._spec = spec
        self._ref = ref
        self._route = route
        self._dropped = 0

    @property
    def ref(self) -> CollectionRef:
        return self._ref

    @property
    def signal(self) -> str:
        """`custom:<namespace>/<collection>`: one signal per function, so a federated merge never
        puts two functions' scores, each on its own scale, in one list."""
        return f"custom:{self._ref.label}"

    async def retrieve(self, query: Query, options: SearchOptions) -> list[Hit]:
        return combine(await self.signal_lists(query, options), options)

    def effective_mode(self, query: Query, options: SearchOptions) -> Mode:
        return options.mode

    def notices(self, query: Query, options: SearchOptions) -> tuple[str, ...]:
        if not self._dropped:
            return ()
        return (f"custom retriever {self._spec!r} returned {self._dropped} chunk(s) claiming another tenant, "
                f"namespace or collection than {self._ref.label!r}; they were dropped",)

    async def signal_lists(self, query: Query, options: SearchOptions) -> dict[str, list[Hit]]:
        # Checked as on a Milvus collection: an unknown field or operator is INVALID_FILTER here too.
        where = compile_filter(options.filter, self._ref.config.metadata_fields) if options.filter else None
        if query.image is not None:
            raise ModalityNotSupported(f"an image query cannot search collection {self._ref.label!r}: it is served by "
                                       f"the custom retriever {self._spec!r}, which takes text only")
        if query.vector is not None and not query.text.strip():
            raise InvalidInput(f"a search by vector alone cannot search collection {self._ref.label!r}: it is served "
                               f"by the custom retriever {self._spec!r}, which takes text only; send `query`")
        scope = self._ref.scope
        request = RetrieverRequest(query.text, max(options.candidates, options.limit), options.mode.value,
                                   scope.tenant, scope.namespace, scope.collection, options.filter, where)
        try:
            if inspect.iscoroutinefunction(self._function):
                result = await self._function(request)
            else:
                result = await offload(self._function, request)
        except GatewayError:
            raise
        except Exception as exc:
            log.warning("custom retriever %s of %s:%s failed: %s", self._spec, scope.tenant, self._ref.label,
                        type(exc).__name__, exc_info=exc)
            raise UpstreamUnavailable(f"custom retriever {self._spec!r} of collection {self._ref.label!r} "
                                      f"failed ({type(exc).__name__})") from None
        return {self.signal: self._hits(result, options.mode)}

    def _hits(self, result: Any, mode: Mode) -> list[Hit]:
        if isinstance(result, (str, bytes, Mapping)) or not hasattr(result, "__iter__"):
            raise self._nonsense(f"returned {type(result).__name__}")
        chunks: list[RetrievedChunk] = []
        for index, item in enumerate(result):
            chunk = self._chunk(item, index)
            if self._foreign(chunk):
                self._dropped += 1
                continue
            chunks.append(chunk)
        if self._dropped:
            log.warning("custom retriever %s dropped %d foreign chunk(s) for %s:%s", self._spec, self._dropped,
                        self._ref.scope.tenant, self._ref.label)
        hits = [self._hit(c, mode) for c in chunks]
        hits.sort(key=lambda h: (-h.score, h.id))
        unique: dict[tuple[str, str, str, str], Hit] = {}
        for hit in hits:
            unique.setdefault(hit.key, hit)  # a repeated chunk keeps its best score
        return [self._ranked(hit, rank) for rank, hit in enumerate(unique.values(), start=1)]

    def _chunk(self, item: Any, index: int) -> RetrievedChunk:
        if isinstance(item, RetrievedChunk):
            chunk = item
        elif isinstance(item, Hit):
            chunk = RetrievedChunk(item.source_id, item.chunk_id, item.content, item.score, item.title,
                                   item.source_url, item.source_path, item.metadata,
                                   tenant=item.provenance.tenant, namespace=item.namespace,
                                   collection=item.collection)
        elif isinstance(item, Mapping):
            unknown = sorted(set(item) - _FIELDS)
            if unknown:
                raise self._nonsense(f"item {index} has unknown key(s) {', '.join(map(repr, unknown))}")
            try:
                chunk = RetrievedChunk(**item)
            except TypeError:
                raise self._nonsense(f"item {index} lacks source_id, chunk_id, content or score") from None
        else:
            raise self._nonsense(f"item {index} is a {type(item).__name__}")
        if not all(isinstance(v, str) and v for v in (chunk.source_id, chunk.chunk_id)):
            raise self._nonsense(f"item {index} needs non-empty string source_id and chunk_id")
        if not isinstance(chunk.content, str):
            raise self._nonsense(f"item {index} content is {type(chunk.content).__name__}, not str")
        score = chunk.score
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise self._nonsense(f"item {index} score is {score!r}, not a finite number")
        if not isinstance(chunk.metadata, Mapping):
            raise self._nonsense(f"item {index} metadata is {type(chunk.metadata).__name__}, not a mapping")
        return chunk

    def _foreign(self, chunk: RetrievedChunk) -> bool:
        scope = self._ref.scope
        claims = ((chunk.tenant, scope.tenant), (chunk.namespace, scope.namespace),
                  (chunk.collection, scope.collection))
        return any(claimed is not None and claimed != own for claimed, own in claims)

    def _hit(self, chunk: RetrievedChunk, mode: Mode) -> Hit:
        scope, config = self._ref.scope, self._ref.config
        metadata = dict(chunk.metadata)
        provenance = Provenance(
            tenant=scope.tenant, namespace=scope.namespace, collection=scope.collection,
            # `mode` is the mode the function was asked for (RetrieverRequest.mode); `retriever` says who ran.
            trust_tier=config.record_tier(metadata).value, retriever=f"custom:{self._spec}", mode=mode.value, route=self._route,
            # The hash keys cached token vectors (lateInteraction), so changed content is re-embedded.
            content_hash=content_hash(text=chunk.content, title=chunk.title or "", metadata=metadata,
                                      source_url=chunk.source_url or "", source_path=chunk.source_path or ""))
        return Hit(namespace=scope.namespace, collection=scope.collection, source_id=chunk.source_id,
                   chunk_id=chunk.chunk_id, content=chunk.content, score=float(chunk.score), provenance=provenance,
                   metadata=metadata, title=chunk.title, source_url=chunk.source_url, source_path=chunk.source_path)

    def _ranked(self, hit: Hit, rank: int) -> Hit:
        provenance = replace(hit.provenance, scores=(SignalScore(self.signal, hit.score, rank),))
        return replace(hit, provenance=provenance)

    def _nonsense(self, problem: str) -> UpstreamUnavailable:
        return UpstreamUnavailable(f"custom retriever {self._spec!r} of collection {self._ref.label!r} {problem}; "
                                   f"it must return a list of RetrievedChunk, Hit, or mappings with source_id, "
                                   f"chunk_id, content, score (and optional title, source_url, source_path, "
                                   f"metadata)")

