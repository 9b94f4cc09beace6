"""Rewriting a scope's chunk collection from its live rows."""

from __future__ import annotations

from gateway.errors import ConfigError, StorageUnavailable
from gateway.storage.milvus.indexing import Indexing
from gateway.storage.milvus.writes import WRITE_BATCH
from gateway.storage.schema import Scope, chunk_index, chunk_schema


class Rebuild(Indexing):
    """A scope's chunk collection rewritten from its live rows."""

    def rebuild(self, scope: Scope) -> int:
        """Rewrite the scope's chunk collection from its live rows; returns how many it kept.

        milvus-lite keeps deleted and replaced rows in its BM25 statistics (document count,
        average length, document frequencies), so sparse ranking drifts after many deletes and
        re-inserts (docs/operations.md). Rewriting the live rows recomputes them. The rows are
        first copied to a staging collection (`<name>__rebuild`), which is dropped only after the
        rewrite holds every row, so a crash mid-way leaves a full copy behind. Searches of this
        collection fail while it is rewritten: run it when the collection is not being served.
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
        rows = [{**row, "dense": [float(x) for x in row["dense"]]}
                for row in self._iterate(scope, source, "id", fields)]
        client = self._client
        dim = len(rows[0]["dense"]) if rows else self.dim  # an image collection's encoder has its own size
        policy = self.index_policy(scope)
        # The staging copy is never searched: exact search needs no index build.
        indexed = policy.index_type(len(rows), self.capabilities.dense_index)

        def write(name: str) -> None:
            index_type = indexed if name == source else "FLAT"
            if client.has_collection(name):
                client.drop_collection(name)
            client.create_collection(name, schema=chunk_schema(client, dim),
                                     index_params=chunk_index(client, index_type, policy.build_params(index_type)))
            for start in range(0, len(rows), WRITE_BATCH):
                client.insert(name, rows[start:start + WRITE_BATCH])
            client.flush(name)
            self._load(name)
            counted = client.query(name, filter=self._boundary(scope, None), output_fields=["count(*)"])
            written = counted[0]["count(*)"] if counted else 0
            if int(written) != len(rows):
                raise StorageUnavailable(f"rebuilding {source}: {name} holds {written} rows, expected "
                                         f"{len(rows)}; {staging if name == source else source} is untouched")

        with self._lock:
            write(staging)
            self._ready.discard(source)
            write(source)
            self._ready.add(source)
            self._modal.add(source)  # chunk_schema has the field, so a rebuilt collection stores it
            self._indexes[source] = indexed
            client.drop_collection(staging)
        return len(rows)
