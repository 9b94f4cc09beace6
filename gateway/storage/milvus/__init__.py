"""The Milvus adapter: one code path for milvus-lite (a local path) and a Milvus server (a URI).

Every read, search and delete goes through :meth:`MilvusStore._boundary` (boundary.py), the one
function that adds the tenant and namespace boundary, taken from a server-side :class:`Scope`.
Where a scope's rows physically live (its own collections, or collections shared by partition-key
tenants) is the :class:`Layout`'s answer, asked only there.

The store is assembled from one module per concept: loading (collections), writes, undo
(deletes), inventory (reads), search, fill, rebuild, records and indexing (the dense index a
collection has), each over the boundary.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from gateway.storage.analyzer import Analyzer
from gateway.storage.capabilities import Capabilities, detect
from gateway.storage.guard import GuardedClient
from gateway.storage.indexes import DenseIndex
from gateway.storage.milvus.connect import connect, is_embedded
from gateway.storage.milvus.fill import Fill
from gateway.storage.milvus.indexing import Indexing
from gateway.storage.milvus.inventory import Inventory
from gateway.storage.milvus.rebuild import Rebuild
from gateway.storage.milvus.records import Records
from gateway.storage.milvus.rows import (
    ChunkRecord,
    ParentRecord,
    Removed,
    ScoredChunk,
    Stored,
    StoredChunk,
    stored_metadata,
)
from gateway.storage.milvus.search import Search
from gateway.storage.milvus.undo import Undo
from gateway.storage.milvus.writes import Writes
from gateway.storage.residency import Residency
from gateway.storage.schema import Layout

__all__ = ["ChunkRecord", "MilvusStore", "ParentRecord", "Removed", "ScoredChunk", "Stored", "StoredChunk",
           "is_embedded", "stored_metadata"]

# Searches sent ahead at once at most; more wait for a thread. Request workers default to four per
# core (admission/workers.py), and a federated search may send one per collection.
AHEAD_THREADS = 32


class MilvusStore(Search, Fill, Inventory, Writes, Undo, Rebuild, Records, Indexing):
    """Chunk and parent collections for (tenant, namespace, collection) scopes."""

    def __init__(self, uri: str, *, token: str | None = None, dim: int = 384,
                 analyzer: Analyzer | None = None, layout: Layout = Layout(), max_chunks: int | None = None) -> None:
        self.uri = uri
        self.dim = dim
        # Chunks a collection may hold (GATEWAY_EMBEDDED_MAX_CHUNKS, milvus-lite only); ingest refuses more.
        self.max_chunks = max_chunks if is_embedded(uri) else None
        self._lite = is_embedded(uri)
        self.analyzer = analyzer or Analyzer()
        # Whether the engine can hold this layout is start-up's check (storage/capabilities.py).
        self.layout = layout
        self._client = connect(uri, token)
        self.capabilities: Capabilities = detect(str(self._client.get_server_version()))
        self._ready: set[str] = set()
        # Chunk collections that store `modality` (created since the field exists; schema.py).
        self._modal: set[str] = set()
        self._lock = threading.Lock()
        self.residency = Residency()
        self._policies: dict[str, DenseIndex] = {}
        self._indexes: dict[str, str] = {}
        self._rows: dict[str, int] = {}
        # Threads that wait on BM25 searches sent ahead (search.py, `sparse_later`), started as
        # concurrent searches need them and kept; one per request worker covers a busy gateway.
        self._ahead = ThreadPoolExecutor(max_workers=AHEAD_THREADS, thread_name_prefix="store-ahead")

    def close(self) -> None:
        self._ahead.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    @property
    def guard(self) -> GuardedClient:
        """The guarded client: its fault log, committed row counts and the gateway's record."""
        return self._client
