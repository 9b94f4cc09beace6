"""The write path behind the API: upsert and delete for writers and admins of their own tenant."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gateway.conversations.memory import Memory, MemoryWriter, check_bound_writer, owned
from gateway.embedding.base import Embedder, Modality
from gateway.embedding.modal import collection_embedder
from gateway.errors import InvalidInput, LimitExceeded, UnknownSource
from gateway.ingest.loaders import Document
from gateway.ingest.sync import WINDOW, IngestReport, chunk_document, ingest_documents, remove_source, remove_sources
from gateway.storage.identifiers import check_source_id
from gateway.storage.milvus import MilvusStore
from gateway.storage.vectors import check_dimension
from gateway.storage.token_vectors import TokenVectorStore
from gateway.runtime import token_target
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role
from gateway.tenancy.registry import CollectionRef, TenantRegistry


# Sources one deleteSources call may name: one `source_id in [...]` expression (storage ID_BATCH). Deleting
# sources one deleteSource call at a time costs the store a pass over the collection each (0.38 s a call at
# 100,000 chunks beside `gateway serve`); a batch costs a few passes in all.
MAX_DELETE_SOURCES = 500


@dataclass(frozen=True, slots=True)
class SourcesDeleted:
    """What deleteSources removed: each deleted source's chunk ids (chunk order), and the ids that had no chunk."""

    deleted: tuple[tuple[str, tuple[str, ...]], ...]
    missing: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UpsertLimits:
    """What one upsertDocuments call (or ingest job) may carry (GATEWAY_MAX_UPSERT_*, GATEWAY_MAX_METADATA_BYTES)."""

    documents: int = 256
    chunks: int = 2048
    metadata_bytes: int = 8192
    # The settings named in limit errors (ingest jobs have their own).
    documents_setting: str = "GATEWAY_MAX_UPSERT_DOCUMENTS"
    chunks_setting: str = "GATEWAY_MAX_UPSERT_CHUNKS"


class Writer:
    """Writes go one at a time per collection, so content-hash diffs never race."""

    def __init__(self, registry: TenantRegistry, store: MilvusStore, embedder: Embedder | None,
                 tokens: TokenVectorStore | None = None, limits: UpsertLimits = UpsertLimits()) -> None:
        self._registry = registry
        self._store = store
        self._embedder = embedder
        self._tokens = tokens
        self._limits = limits
        self._locks: dict[str, asyncio.Lock] = {}
        self._memories = MemoryWriter(registry, store, embedder)

    async def upsert(self, principal: Principal, namespace: str, collection: str,
                     documents: Sequence[Document]) -> IngestReport:
        principal.require(Role.WRITER, "write documents")
        ref = self._registry.resolve(principal.tenant, collection, namespace=namespace)
        check_bound_writer(principal, ref)
        self.check(ref, documents)
        return await self.ingest(principal, ref, documents)

    async def ingest(self, principal: Principal, ref: CollectionRef, documents: Sequence[Document], *,
                     on_window: Callable[[IngestReport], None] | None = None, window: int = WINDOW) -> IngestReport:
        """Ingest documents already checked (`check`) into a resolved collection of the caller's tenant."""
        # Without an embedder, documents that bring their vectors are written; others are refused by name.
        async with self._lock(ref.scope.chunk_collection):
            tokens = token_target(self._registry, self._tokens, principal.tenant)
            return await asyncio.to_thread(ingest_documents, self._store, self._embedder, ref, list(documents),
                                           progress=False, tokens=tokens, on_window=on_window, window=window)

    async def delete_source(self, principal: Principal, namespace: str, collection: str,
                            source_id: str) -> list[str]:
        """Delete one source; returns the chunk ids it had (a client cache evicts those)."""
        principal.require(Role.WRITER, "delete sources")
        ref = self._registry.resolve(principal.tenant, collection, namespace=namespace)
        check_source_id(source_id)
        async with self._lock(ref.scope.chunk_collection):
            if not await asyncio.to_thread(self._store.open_existing, ref.scope):
                removed, chunk_ids = None, []
            else:
                # Read under the collection's write lock, so no upsert through this gateway adds a chunk between.
                chunks = await asyncio.to_thread(self._store.source_chunks, ref.scope, source_id)
                if not owned(principal, ref, chunks):  # another user's memory: for a bound key, not there
                    raise UnknownSource(f"source {source_id!r} is not in {ref.label}; nothing was deleted")
                chunk_ids = [c.chunk_id for c in chunks]
                removed = await asyncio.to_thread(remove_source, self._store, self._tokens, ref.scope, source_id)
        # A source whose chunks an interrupted delete already removed still has parents to remove.
        if removed is None or not (removed.chunks or removed.parents):
            raise UnknownSource(f"source {source_id!r} is not in {ref.label}; nothing was deleted")
        return chunk_ids

    async def delete_sources(self, principal: Principal, namespace: str, collection: str,
                             source_ids: Sequence[str]) -> SourcesDeleted:
        """Delete up to MAX_DELETE_SOURCES sources in a few batched store calls; ids with no chunk are
        reported as missing (leftover parents of an interrupted delete are removed with the rest)."""
        principal.require(Role.WRITER, "delete sources")
        ref = self._registry.resolve(principal.tenant, collection, namespace=namespace)
        check_bound_writer(principal, ref)  # a key bound to a user deletes its memories one at a time
        if not source_ids:
            raise InvalidInput("sourceIds is empty; send at least one")
        if len(source_ids) > MAX_DELETE_SOURCES:
            raise LimitExceeded(f"{len(source_ids)} sourceIds in one deleteSources call; at most "
                                f"{MAX_DELETE_SOURCES}; split the request")
        unique = list(dict.fromkeys(source_ids))
        for source_id in unique:
            check_source_id(source_id)
        async with self._lock(ref.scope.chunk_collection):
            if not await asyncio.to_thread(self._store.open_existing, ref.scope):
                return SourcesDeleted((), tuple(unique))
            chunks = await asyncio.to_thread(self._store.chunk_ids_of, ref.scope, unique)
            await asyncio.to_thread(remove_sources, self._store, self._tokens, ref.scope, unique)
        return SourcesDeleted(tuple((s, tuple(chunks[s])) for s in unique if s in chunks),
                              tuple(s for s in unique if s not in chunks))

    async def add_memory(self, principal: Principal, namespace: str, collection: str, content: str, *,
                         user_id: str, memory_type: str, importance: float, memory_id: str | None = None) -> Memory:
        """One memory into a `kind: memory` collection (docs/conversations.md)."""
        return await self._memories.add(principal, namespace, collection, content, user_id=user_id,
                                        memory_type=memory_type, importance=importance, memory_id=memory_id)

    def resolve(self, principal: Principal, namespace: str, collection: str) -> CollectionRef:
        principal.require(Role.WRITER, "write documents")
        ref = self._registry.resolve(principal.tenant, collection, namespace=namespace)
        check_bound_writer(principal, ref)
        return ref

    def check(self, ref: CollectionRef, documents: Sequence[Document], limits: UpsertLimits | None = None,
              call: str = "upsertDocuments call", files: int = 0) -> None:
        """The request's size, before anything is embedded or written; `files` not yet parsed count as documents."""
        if ref.config.retriever is not None:
            raise InvalidInput(f"collection {ref.label!r} is served by the custom retriever {ref.config.retriever!r}, "
                               f"which never reads documents written here; write to a collection without `retriever`")
        limits = limits or self._limits
        if not documents and not files:
            raise InvalidInput("documents is empty; send at least one")
        if len(documents) + files > limits.documents:
            raise LimitExceeded(f"{len(documents) + files} documents{' and files' if files else ''} in one {call}; "
                                f"at most {limits.documents} ({limits.documents_setting}); split the request")
        self._check_vectors(ref, documents)
        chunks = 0
        for doc in documents:
            size = len(json.dumps(dict(doc.metadata), ensure_ascii=False).encode("utf-8", "surrogatepass"))
            if size > limits.metadata_bytes:
                raise LimitExceeded(f"metadata of document {doc.source_id!r} is {size} bytes as JSON; at most "
                                    f"{limits.metadata_bytes} (GATEWAY_MAX_METADATA_BYTES), because it is copied "
                                    "into every chunk")
            chunks += len(chunk_document(doc, ref.config.chunking).children)
            if chunks > limits.chunks:
                raise LimitExceeded(f"the documents of this {call} make more than {limits.chunks} chunks (reached at "
                                    f"document {doc.source_id!r}); at most {limits.chunks} per call "
                                    f"({limits.chunks_setting}); split the request")

    def _check_vectors(self, ref: CollectionRef, documents: Sequence[Document]) -> None:
        """Every client vector has the collection's size; named by its place in the request."""
        encoder = collection_embedder(ref.config, self._embedder)
        if encoder is None or Modality.IMAGE in ref.config.modality:
            return  # ingest refuses these with the reason
        for i, doc in enumerate(documents):
            for j, chunk in enumerate(doc.chunks):
                # A document sent with `vector` and `text` is one chunk; `chunks` come without text.
                where = f"documents[{i}].vector" if doc.text else f"documents[{i}].chunks[{j}]"
                check_dimension(chunk.vector, encoder.dim, f"vector of {where}", ref.label)

    @asynccontextmanager
    async def exclusive(self, ref: CollectionRef) -> AsyncIterator[None]:
        """No write of this process to the collection runs while the block runs (admin compact/clear)."""
        async with self._lock(ref.scope.chunk_collection):
            yield

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())
