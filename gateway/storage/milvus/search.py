"""Dense and BM25 searches of a scope, scores normalised so that higher is better."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import numpy as np

from gateway.retrieval.hit import split_row_id
from gateway.storage.analyzer import Analyzer
from gateway.storage.milvus.indexing import Indexing
from gateway.storage.milvus.rows import ScoredChunk, keys_only, searched_fields
from gateway.storage.schema import Scope


class Search(Indexing):
    """Vector and BM25 searches of one scope."""

    def search_dense(self, scope: Scope, vector: np.ndarray, limit: int,
                     where: str | None = None, fields: Collection[str] | None = None) -> list[ScoredChunk]:
        name = self._searchable(scope)
        if name is None:
            return []
        params: dict[str, Any] = {"metric_type": "COSINE"}
        tuning = self.dense_search_params(name, limit)
        if tuning:
            params["params"] = tuning
        result = self._search(name, {
            "data": [np.asarray(vector, dtype=np.float32).tolist()], "anns_field": "dense", "limit": limit,
            "filter": self._boundary(scope, where), "output_fields": self._searched(name, fields),
            "search_params": params})
        # COSINE similarity is already "higher is better".
        return self._scored(scope, result[0], fields, float)

    def search_sparse(self, scope: Scope, text: str, limit: int, where: str | None = None,
                      fields: Collection[str] | None = None, analyzer: Analyzer | None = None) -> list[ScoredChunk]:
        """BM25 over the scope; `analyzer` is the collection's language's (default: the store's, English),
        and must be the one its chunks were written with."""
        return self._sparse(scope, text, limit, where, fields, analyzer, sent=False)()

    def sparse_later(self, scope: Scope, text: str, limit: int, where: str | None = None,
                     fields: Collection[str] | None = None,
                     analyzer: Analyzer | None = None) -> Callable[[], list[ScoredChunk]]:
        """`search_sparse`, sent to the store now and read when the function returned is called: the
        store ranks by BM25 while this thread embeds the query, so a hybrid search waits for one
        round trip fewer. A search that fails in flight runs again the ordinary way (guarded:
        admitted, mapped, the collection reloaded); a read may run twice.

        The call waits on one of the store's threads kept for it (`ahead`), not as a gRPC future:
        a future with no other one in flight makes gRPC start a thread to poll the channel and end
        it when the call completes, a thread's start and end per search."""
        return self._sparse(scope, text, limit, where, fields, analyzer, sent=True)

    def _sparse(self, scope: Scope, text: str, limit: int, where: str | None, fields: Collection[str] | None,
                analyzer: Analyzer | None, *, sent: bool) -> Callable[[], list[ScoredChunk]]:
        analysed = (analyzer or self.analyzer).analyse(text)
        name = self._searchable(scope) if analysed else None
        if name is None:
            return list
        request = {"data": [analysed], "anns_field": "sparse", "limit": limit, "filter": self._boundary(scope, where),
                   "output_fields": self._searched(name, fields),
                   "search_params": {"metric_type": "BM25"}}
        # milvus-lite returns BM25 as a negative distance, a Milvus server as a positive
        # score; BM25 is never negative, so its magnitude is the score on both engines.
        def scored(result: Any) -> list[ScoredChunk]:
            return self._scored(scope, result[0], fields, lambda distance: abs(float(distance)))

        if not sent:
            result = self._search(name, request)
            return lambda: scored(result)
        try:
            pending = self._ahead.submit(self._search, name, request)
        except RuntimeError:  # the store is closed: the ordinary call below says so
            result = self._search(name, request)
            return lambda: scored(result)

        def rows() -> list[ScoredChunk]:
            try:
                result = pending.result()
            except Exception:  # noqa: BLE001 - the guarded call below says what went wrong, or succeeds
                result = self._search(name, request)
            return scored(result)

        return rows

    def _searched(self, name: str, fields: Collection[str] | None) -> list[str]:
        """What a search fetches: the primary key alone for identities (`searched_fields`), else the
        fields and, where the collection stores it, the modality (a caller that reads it asks for it)."""
        searched = searched_fields(fields)
        return searched if keys_only(fields) else self._with_modality(name, searched)

    def _search(self, name: str, request: dict[str, Any]) -> Any:
        """The guarded search: on milvus-lite, one for keys only takes the lean call (milvus/client.py)."""
        if self._lite and request["output_fields"] == ["id"]:
            return self._client.search_keys(name, **request)
        return self._client.search(name, **request)

    def _scored(self, scope: Scope, hits: Iterable[Mapping[str, Any]], fields: Collection[str] | None,
                score: Callable[[Any], float]) -> list[ScoredChunk]:
        """A search's rows. A search for identities only fetched primary keys: the rest of a row's
        identity is in its key (`namespace/sourceId/chunkId`, after the tenant in a shared collection),
        and its tenant and namespace are the scope's, which the search's boundary clause required."""
        if not keys_only(fields):
            return [ScoredChunk(h["entity"], score(h["distance"])) for h in hits]
        physical, namespace, tenant = self.physical(scope), scope.namespace, scope.tenant
        prefix = f"{namespace}/"
        scored = []
        # pymilvus's hits hold keys and distances as columns, read without building each hit's row.
        for row_id, distance in zip(hits.ids, hits.distances, strict=True):  # type: ignore[attr-defined]
            key = physical.logical_key(row_id)
            if not key.startswith(prefix):
                continue  # not a row of this scope's namespace, which the boundary clause already excluded
            source_id, chunk_id = split_row_id(namespace, key)
            scored.append(ScoredChunk({"id": row_id, "tenant": tenant, "namespace": namespace,
                                       "source_id": source_id, "chunk_id": chunk_id}, score(distance)))
        return scored

