"""Rewriting a scope's chunk collection from its live rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gateway.errors import ConfigError, StorageUnavailable
from gateway.storage import bulk
from gateway.storage.indexes import DenseIndex
from gateway.storage.milvus.indexing import Indexing
from gateway.storage.milvus.writes import ENGINE_BATCH, WRITE_BATCH
from gateway.storage.schema import Scope, chunk_index, chunk_schema


class Rebuild(Indexing):
    """A scope's chunk collection rewritten from its live rows."""

    def rebuild(self, scope: Scope, on_rows: Callable[[str, int], None] | None = None) -> int:
        """Rewrite the scope's chunk collection from its live rows; returns how many it kept.
        `on_rows(step, rows)` hears the progress after each page: step "copy" (into staging), then "rewrite".

        milvus-lite keeps deleted and replaced rows in its BM25 statistics (document count,
        average length, document frequencies), so sparse ranking drifts after many deletes and
        re-inserts (docs/operations.md). Rewriting the live rows recomputes them. The rows are
        first copied to a staging collection (`<name>__rebuild`), which is dropped only after the
        rewrite holds every row, so a crash mid-way leaves a full copy behind. Searches of this
        collection fail while it is rewritten: run it when the collection is not being served.
        Rows move a page at a time: a million rows' vectors as Python floats would not fit in memory.
        """
        where = self.physical(scope)
        if where.shared:
            raise ConfigError(
                f"rebuild rewrites a whole collection, and tenant {scope.tenant!r} (isolation: partition_key) "
                f"shares {where.chunks} with other tenants; rebuild is for milvus-lite's BM25 statistics "
                "(isolation: collection), which a Milvus server does not need")
        source, staging = where.chunks, f"{where.chunks}__rebuild"
        fields = ["tenant", "namespace", "source_id", "chunk_id", "parent_key", "text", "bm25_text", "dense",
                  "title", "source_url", "source_path", "content_hash", "created_at", "updated_at", "metadata"]
        self.ensure(scope)
        fields = self._with_modality(source, fields)
        client = self._client
        policy = self.index_policy(scope)
        # The staging copy is never searched: exact search needs no index build.
        indexed = policy.index_type(self._count(scope, source), self.capabilities.dense_index)

        def write(name: str, rows: Iterable[dict[str, Any]], step: str) -> int:
            """`rows` into a new collection `name`, a page at a time; returns how many, checked
            against the collection's count."""
            index_type = indexed if name == source else "FLAT"
            if client.has_collection(name):
                client.drop_collection(name)
            written, page = 0, []
            for row in rows:
                page.append(row)
                if len(page) == ENGINE_BATCH:
                    written += self._rewrite_page(name, page, written == 0, ["id", *fields], index_type, policy)
                    page = []
                    if on_rows is not None:
                        on_rows(step, written)
            if page or written == 0:
                written += self._rewrite_page(name, page, written == 0, ["id", *fields], index_type, policy)
                if on_rows is not None:
                    on_rows(step, written)
            client.flush(name)
            self._load(name)
            held = self._count(scope, name)
            if held != written:
                raise StorageUnavailable(f"rebuilding {source}: {name} holds {held} rows, expected "
                                         f"{written}; {staging if name == source else source} is untouched")
            return written

        with self._lock:
            kept = write(staging, self._iterate(scope, source, "id", fields), "copy")
            self._ready.discard(source)
            if write(source, self._iterate(scope, staging, "id", fields), "rewrite") != kept:
                raise StorageUnavailable(f"rebuilding {source}: it was rewritten with other rows than the {kept} "
                                         f"{staging} holds; {staging} is untouched")
            self._ready.add(source)
            self._modal.add(source)  # chunk_schema has the field, so a rebuilt collection stores it
            self._indexes[source] = indexed
            client.drop_collection(staging)
        return kept

    def _rewrite_page(self, name: str, page: list[dict[str, Any]], first: bool, fields: list[str],
                      index_type: str, policy: DenseIndex) -> int:
        """One page of a rebuild's rows into `name`, which the first page creates (with its vectors' size)."""
        client = self._client
        if first:
            dim = len(page[0]["dense"]) if page else self.dim  # an image collection's encoder has its own size
            client.create_collection(name, schema=chunk_schema(client, dim),
                                     index_params=chunk_index(client, index_type, policy.build_params(index_type)))
        if not page:
            return 0
        engine = bulk.engine_collection(client.store_dir, name)
        if engine is not None:
            with client.batch():
                bulk.EngineWriter(engine).insert(bulk.rows_to_columns(page, fields))
            return len(page)
        for start in range(0, len(page), WRITE_BATCH):
            client.insert(name, [{**row, "dense": [float(x) for x in row["dense"]]}
                                 for row in page[start:start + WRITE_BATCH]])
        return len(page)
