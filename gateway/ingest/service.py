"""The write path behind the API: upsert and delete for writers and admins of their own tenant."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gateway.embedding.base import Embedder
from gateway.errors import InvalidInput, ModeNotSupported, UnknownSource
from gateway.ingest.loaders import Document
from gateway.ingest.sync import IngestReport, ingest_documents
from gateway.storage.milvus import MilvusStore
from gateway.storage.token_vectors import TokenVectorStore
from gateway.runtime import token_target
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role
from gateway.tenancy.registry import TenantRegistry

MAX_DOCUMENTS = 1000


class Writer:
    """Writes go one at a time per collection, so content-hash diffs never race."""

    def __init__(self, registry: TenantRegistry, store: MilvusStore, embedder: Embedder | None,
                 tokens: TokenVectorStore | None = None) -> None:
        self._registry = registry
        self._store = store
        self._embedder = embedder
        self._tokens = tokens
        self._locks: dict[str, asyncio.Lock] = {}

    async def upsert(self, principal: Principal, namespace: str, collection: str,
                     documents: Sequence[Document]) -> IngestReport:
        principal.require(Role.WRITER, "write documents")
        ref = self._registry.resolve(principal.tenant, collection, namespace=namespace)
        if not documents:
            raise InvalidInput("documents is empty; send at least one")
        if len(documents) > MAX_DOCUMENTS:
            raise InvalidInput(f"{len(documents)} documents in one call; at most {MAX_DOCUMENTS}")
        if self._embedder is None:
            raise ModeNotSupported("this gateway has no embedder configured, so it cannot index documents")
        async with self._lock(ref.scope.chunk_collection):
            tokens = token_target(self._registry, self._tokens, principal.tenant)
            return await asyncio.to_thread(ingest_documents, self._store, self._embedder, ref, list(documents),
                                           progress=False, tokens=tokens)

    async def delete_source(self, principal: Principal, namespace: str, collection: str, source_id: str) -> int:
        principal.require(Role.WRITER, "delete sources")
        ref = self._registry.resolve(principal.tenant, collection, namespace=namespace)
        async with self._lock(ref.scope.chunk_collection):
            if not await asyncio.to_thread(self._store.open_existing, ref.scope):
                deleted = 0
            else:
                deleted = await asyncio.to_thread(self._store.delete_source, ref.scope, source_id)
                if self._tokens is not None:
                    # Token vectors are derived from the content: they go with it.
                    await asyncio.to_thread(self._tokens.delete_source, ref.scope, source_id)
        if deleted == 0:
            raise UnknownSource(f"source {source_id!r} is not in {ref.label}; nothing was deleted")
        return deleted

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())
