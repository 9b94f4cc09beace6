"""Upserting chunk and parent rows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from milvus_lite.exceptions import MilvusLiteError, SchemaValidationError
from pymilvus.client import entity_helper

from gateway.errors import ConfigError, StorageUnavailable
from gateway.retrieval.hit import chunk_row_id
from gateway.storage import bulk
from gateway.storage.analyzer import Analyzer
from gateway.storage.guard import RETRY_HINT
from gateway.storage.milvus.indexing import Indexing
from gateway.storage.milvus.rows import ChunkRecord, ParentRecord
from gateway.storage.schema import MODALITY_FIELD, Scope

# Rows per upsert message: with 64 KiB of text and 8 KiB of metadata a row, well under the
# 64 MiB gRPC message a Milvus server accepts.
WRITE_BATCH = 256
# Rows per batch handed to milvus-lite's engine in this process (storage/bulk.py): 4,096 rows of
# 384 float32 and 1 KB of text are about 10 MB of Arrow buffers.
ENGINE_BATCH = 4096

# pymilvus 3.0's row packing runs its string-array check on each VARCHAR value of a row, so it walks
# the value's characters (an isinstance and a len per character): half of a bulk load's CPU time at
# 400-character chunks. For a row value the check compares each character's length (1) with the
# field's limit and so can fail nothing; the server checks max_length itself.
entity_helper.CHECK_STR_ARRAY = False
# milvus-lite's memtable flush, column by column (storage/bulk.py).
bulk.patch_engine()


class Writes(Indexing):
    """Chunk and parent rows upserted in messages of WRITE_BATCH rows, flushed once per call."""

    def upsert_chunks(self, scope: Scope, chunks: Sequence[ChunkRecord], analyzer: Analyzer | None = None, *,
                      reconcile: bool = True) -> None:
        """Write chunks; `analyzer` is the collection's language's (default: the store's, English).
        `reconcile=False`: the dense index is left as it is; the caller reconciles it (`reconcile_index`)
        once after several writes (a bulk load builds a graph index once, at its end)."""
        if not chunks:
            return
        analyzer = analyzer or self.analyzer
        analyse = analyzer.analyse
        where = self.physical(scope)
        modal = where.chunks in self._modal
        if not modal and any(c.modality != "text" for c in chunks):
            raise ConfigError(f"collection {where.chunks} was created before rows stored their modality, so it holds "
                              "text only (and its vectors have the text model's size); ingest the images into a "
                              "collection of a new name")
        if self._insert_in_engine(scope, chunks, modal, analyzer):
            if reconcile:
                self.reconcile_index(scope)
            return
        # Rows are built one message at a time: a round of a bulk load holds thousands of chunks, and a
        # row's vector as a list of Python floats is eight times its float32 array.
        rows = lambda batch: [{  # noqa: E731
            "id": where.row_key(chunk_row_id(scope.namespace, c.source_id, c.chunk_id)),
            "tenant": scope.tenant,
            "namespace": scope.namespace,
            "source_id": c.source_id,
            "chunk_id": c.chunk_id,
            "parent_key": c.parent_key,
            "text": c.text,
            "bm25_text": analyse(c.index_text or c.text),
            "dense": np.asarray(c.dense, dtype=np.float32).tolist(),
            "title": c.title,
            "source_url": c.source_url,
            "source_path": c.source_path,
            "content_hash": c.content_hash,
            "created_at": c.created_at,
            "updated_at": c.updated_at,
            "metadata": dict(c.metadata),
            **({MODALITY_FIELD: c.modality} if modal else {}),
        } for c in batch]
        with self._client.batch():
            for start in range(0, len(chunks), WRITE_BATCH):
                self._client.upsert(where.chunks, rows(chunks[start:start + WRITE_BATCH]))
            # milvus-lite searches unflushed rows ~50x slower: flush after every batch.
            self._client.flush(where.chunks)
        # A collection that grew past its policy's size for exact search gets its graph index now.
        if reconcile:
            self.reconcile_index(scope)

    def _insert_in_engine(self, scope: Scope, chunks: Sequence[ChunkRecord], modal: bool,
                          analyzer: Analyzer) -> bool:
        """Chunks straight into milvus-lite's engine when it runs in this process (storage/bulk.py);
        False when it does not, and the rows go through pymilvus."""
        where = self.physical(scope)
        return self._in_engine(where.chunks, (
            bulk.chunk_columns(scope, where, chunks[start:start + ENGINE_BATCH], analyzer, modal, chunk_row_id)
            for start in range(0, len(chunks), ENGINE_BATCH)), shared=where.shared)

    def _in_engine(self, name: str, batches: Iterable[dict[str, Any]], shared: bool = False) -> bool:
        """Batches of columns (`bulk.EngineWriter.insert`) into collection `name` when milvus-lite's engine
        runs in this process, then flushed; False when it does not (nothing is written). `batches` is
        a generator: each batch's columns are built as they are written, and none without the engine."""
        engine = None if shared else bulk.engine_collection(self._client.store_dir, name)
        if engine is None:
            return False
        with self._client.batch():
            try:
                writer = bulk.EngineWriter(engine)
                for columns in batches:
                    writer.insert(columns)
            except SchemaValidationError:
                raise  # a row the engine refuses (a value over its length), as pymilvus's path raises it
            except (OSError, MilvusLiteError) as exc:
                raise StorageUnavailable(f"storage failed during insert on {name}: {type(exc).__name__}: "
                                         f"{exc}; {RETRY_HINT}") from exc
            self._client.flush(name)
        return True

    def upsert_parents(self, scope: Scope, parents: Sequence[ParentRecord]) -> None:
        if not parents:
            return
        where = self.physical(scope)
        if self._in_engine(where.parents, (_parent_columns(scope, where, parents[start:start + ENGINE_BATCH])
                                           for start in range(0, len(parents), ENGINE_BATCH)), shared=where.shared):
            return
        rows = [{
            "key": where.row_key(p.key), "tenant": scope.tenant, "namespace": scope.namespace,
            "source_id": p.source_id, "title": p.title, "text": p.text,
            "content_hash": p.content_hash, "metadata": dict(p.metadata), "placeholder": [0.0, 0.0],
        } for p in parents]
        with self._client.batch():
            for start in range(0, len(rows), WRITE_BATCH):
                self._client.upsert(where.parents, rows[start:start + WRITE_BATCH])
            self._client.flush(where.parents)


def _parent_columns(scope: Scope, where: Any, parents: Sequence[ParentRecord]) -> dict[str, Any]:
    """The parent collection's columns (storage/schema.py's parent_schema) for `bulk.EngineWriter.insert`."""
    return {
        "key": [where.row_key(p.key) for p in parents],
        "tenant": [scope.tenant] * len(parents),
        "namespace": [scope.namespace] * len(parents),
        "source_id": [p.source_id for p in parents],
        "title": [p.title for p in parents],
        "text": [p.text for p in parents],
        "content_hash": [p.content_hash for p in parents],
        "metadata": [p.metadata for p in parents],
        "placeholder": np.zeros((len(parents), 2), dtype=np.float32),
    }
