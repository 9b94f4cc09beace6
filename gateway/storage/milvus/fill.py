"""Fetching the stored fields of a search's rows, which it fetched as identities only."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gateway.storage.filters import literal
from gateway.storage.milvus.boundary import ID_BATCH
from gateway.storage.milvus.loading import Loading
from gateway.storage.milvus.rows import ScoredChunk, output_fields
from gateway.storage.schema import Scope


class Fill(Loading):
    """The stored fields of rows a search returned as identities."""

    def fill(self, scope: Scope, rows: Sequence[ScoredChunk],
             fields: Collection[str] | None = None) -> list[ScoredChunk]:
        """`rows` of this scope's searches, fetched with identities only, with their stored `fields`
        (None: every one), by primary key: a fused search ranks a hundred rows and returns ten, and
        ten rows' text cost less to fetch than a hundred's. A row deleted since the search is left out.

        The lookup names primary keys only: on milvus-lite a boundary clause beside them made it scan
        the collection, and cost more than it saved. The keys come from a search that had the boundary,
        never from a caller, and each row found is checked against the boundary here."""
        name = self._searchable(scope) if rows else None
        if name is None:
            return []
        output = self._with_modality(name, output_fields(fields))
        ids = list(dict.fromkeys(row.row_id for row in rows))
        found: dict[str, Mapping[str, Any]] = {}
        for start in range(0, len(ids), ID_BATCH):
            where = f"id in [{', '.join(literal(key) for key in ids[start:start + ID_BATCH])}]"
            for row in self._client.query(name, filter=where, output_fields=output):
                if row["tenant"] == scope.tenant and row["namespace"] == scope.namespace:
                    found[row["id"]] = row
        return [ScoredChunk(found[row.row_id], row.score) for row in rows if row.row_id in found]
