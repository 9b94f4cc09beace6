"""The pymilvus client of a milvus-lite store, with a lean call for searches that fetch keys only.

A hybrid request makes two searches that fetch only primary keys (storage/milvus/search.py). Of
the client's CPU for one (0.41 ms on the 2-core host), gRPC's own call is 0.24 ms; pymilvus's
wrapper around it (argument checks, retry and tracing decorators, building a hit object per row)
is most of the rest. `search_keys` builds the request with pymilvus's own builder, sends it on the
client's own channel and reads the keys and distances straight from the answer.

Only on milvus-lite: pymilvus's retries (an RPC error again and again for up to 75 attempts, a
rate limit) answer how a Milvus cluster fails. On milvus-lite a call that finds the server gone
fails at once, and the guard (storage/guard.py) waits for the store's health and runs it again,
as it does every call's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pymilvus import MilvusClient
from pymilvus.client.grpc_handler import _api_level_md
from pymilvus.client.prepare import Prepare
from pymilvus.client.utils import check_status


@dataclass(frozen=True, slots=True)
class KeyHits:
    """One query's hits as columns, as pymilvus's hits hold them: primary keys and distances."""

    ids: Sequence[Any]
    distances: Sequence[float]

    def __len__(self) -> int:
        return len(self.ids)


class StoreClient(MilvusClient):
    """MilvusClient plus `search_keys`, for milvus-lite (embedded or served)."""

    def search_keys(self, collection_name: str, *, data: list, anns_field: str, limit: int,
                    filter: str, output_fields: list[str], search_params: dict) -> list[KeyHits]:  # noqa: A002
        """`search(...)` for primary keys only, with the same arguments: one KeyHits per query in
        `data`. A refusal raises the MilvusException that `search` raises; a failed call, its
        grpc.RpcError."""
        if output_fields != ["id"]:
            raise ValueError(f"search_keys fetches the primary key alone, not {output_fields!r}")
        handler = self._get_connection()
        request = Prepare.search_requests_with_expr(
            collection_name=collection_name, anns_field=anns_field, param=search_params, limit=limit, data=data,
            expr=filter, output_fields=output_fields, use_default_consistency=True)
        response = handler._stub.Search(request, metadata=_api_level_md(self._generate_call_context()))
        check_status(response.status)
        results = response.results
        keys = results.ids.str_id.data if results.ids.HasField("str_id") else results.ids.int_id.data
        hits, start = [], 0
        for count in results.topks:
            hits.append(KeyHits(keys[start:start + count], results.scores[start:start + count]))
            start += count
        return hits
