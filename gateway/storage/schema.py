"""Physical names and the Milvus schema of chunk and parent collections."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pymilvus import DataType, Function, FunctionType, MilvusClient

from gateway.storage.indexes import DenseIndex

MAX_ID = 1024
# A shared collection's primary keys carry the tenant (`<tenant>/<id>`): tenant names are at most
# 63 characters of [a-z0-9_-], so the prefix never contains the separator.
TENANT_PREFIX = 64
MAX_TEXT = 65_535  # Milvus's VARCHAR ceiling, in bytes
MAX_SHORT = 4096

# Every field a search returns; vectors are never read back (a search without explicit
# output_fields returns them all on milvus-lite).
CHUNK_OUTPUT_FIELDS = [
    "id", "tenant", "namespace", "source_id", "chunk_id", "parent_key", "text", "title",
    "source_url", "source_path", "content_hash", "created_at", "updated_at", "metadata",
]
PARENT_OUTPUT_FIELDS = ["key", "tenant", "namespace", "source_id", "title", "text", "metadata",
                        "content_hash"]
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
MODALITY_FIELD = "modality"


class Isolation(StrEnum):
    """How a tenant's collections are laid out in Milvus (a tenant file's `isolation`)."""

    # One physical chunk and parent collection per (tenant, namespace, collection): works everywhere.
    COLLECTION = "collection"
    # Tenants share one physical collection per (namespace, collection) name, `tenant` being the
    # Milvus partition key: many small tenants without thousands of collections. Milvus server only.
    PARTITION_KEY = "partition_key"


@dataclass(frozen=True, slots=True)
class Scope:
    """The server-side boundary of a storage call: always taken from the authenticated tenant."""

    tenant: str
    namespace: str
    collection: str

    @property
    def chunk_collection(self) -> str:
        return physical_name(self, "c")

    @property
    def parent_collection(self) -> str:
        return physical_name(self, "p")


def physical_name(scope: Scope, kind: str) -> str:
    """gw_<kind>_<readable>_<hash>: readable, within Milvus's 255 characters, collision-free."""
    return _physical_name(scope.tenant, scope.namespace, scope.collection, kind)


# A search names its collections several times (boundary, residency, fill, trace): a hash and a
# regex each time were 3% of a served search's Python. Names are pure functions of their parts;
# the bound keeps the memo a few hundred KiB whatever the number of tenants.
@functools.lru_cache(maxsize=4096)
def _physical_name(tenant: str, namespace: str, collection: str, kind: str) -> str:
    exact = f"{tenant}\x00{namespace}\x00{collection}"
    digest = hashlib.sha256(exact.encode()).hexdigest()[:12]
    readable = _UNSAFE.sub("_", f"{tenant}__{namespace}__{collection}")[:180]
    return f"gw_{kind}_{readable}_{digest}"


@functools.lru_cache(maxsize=4096)
def shared_name(namespace: str, collection: str, kind: str) -> str:
    """gw_<kind>s_<readable>_<hash>: the collection that partition-key tenants share."""
    exact = f"{namespace}\x00{collection}"
    digest = hashlib.sha256(exact.encode()).hexdigest()[:12]
    readable = _UNSAFE.sub("_", f"{namespace}__{collection}")[:180]
    return f"gw_{kind}s_{readable}_{digest}"


@dataclass(frozen=True, slots=True)
class Physical:
    """Where one scope's rows live, and how its logical keys become primary keys there.

    In a shared collection two tenants may both hold `docs/readme/0`, so primary keys carry the
    tenant; callers above the adapter only ever see logical keys.
    """

    chunks: str
    parents: str
    shared: bool
    tenant: str

    def row_key(self, key: str) -> str:
        return f"{self.tenant}/{key}" if self.shared else key

    def logical_key(self, key: str) -> str:
        return key.partition("/")[2] if self.shared else key


@dataclass(frozen=True, slots=True)
class Layout:
    """Which tenants share collections (isolation: partition_key); everyone else is isolated."""

    shared_tenants: frozenset[str] = frozenset()

    @classmethod
    def of(cls, isolation: Iterable[tuple[str, Isolation]]) -> Layout:
        return cls(frozenset(t for t, mode in isolation if mode is Isolation.PARTITION_KEY))

    def physical(self, scope: Scope) -> Physical:
        if scope.tenant in self.shared_tenants:
            return Physical(shared_name(scope.namespace, scope.collection, "c"),
                            shared_name(scope.namespace, scope.collection, "p"), True, scope.tenant)
        return Physical(scope.chunk_collection, scope.parent_collection, False, scope.tenant)


def chunk_schema(client: MilvusClient, dim: int, *, partition_key: bool = False):
    """A chunk collection; with `partition_key`, shared by tenants and partitioned by `tenant`."""
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=_key_length(partition_key))
    schema.add_field("tenant", DataType.VARCHAR, max_length=256, is_partition_key=partition_key)
    schema.add_field("namespace", DataType.VARCHAR, max_length=256)
    schema.add_field("source_id", DataType.VARCHAR, max_length=MAX_ID)
    schema.add_field("chunk_id", DataType.VARCHAR, max_length=256)
    schema.add_field("parent_key", DataType.VARCHAR, max_length=MAX_ID)
    schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT)
    # What the BM25 function reads: `text` analysed in the gateway (see storage/analyzer.py).
    schema.add_field("bm25_text", DataType.VARCHAR, max_length=MAX_TEXT, enable_analyzer=True,
                     analyzer_params={"type": "standard"})
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_field("title", DataType.VARCHAR, max_length=MAX_SHORT)
    schema.add_field("source_url", DataType.VARCHAR, max_length=MAX_SHORT)
    schema.add_field("source_path", DataType.VARCHAR, max_length=MAX_SHORT)
    schema.add_field("content_hash", DataType.VARCHAR, max_length=80)
    schema.add_field("created_at", DataType.INT64)
    schema.add_field("updated_at", DataType.INT64)
    schema.add_field("metadata", DataType.JSON)
    # What `dense` was computed from (embedding.base.Modality). Only collections created since
    # this field exists have it: Milvus cannot add a field to a collection on milvus-lite, so
    # older collections are read as text (which they are) and never hold an image row.
    schema.add_field(MODALITY_FIELD, DataType.VARCHAR, max_length=16, default_value="text")
    schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                 input_field_names=["bm25_text"], output_field_names=["sparse"]))
    return schema


def chunk_index(client: MilvusClient, dense_index: str, build: Mapping[str, Any] | None = None):
    """Index parameters of a chunk collection: `dense_index` (a Milvus index type, storage/indexes.py)
    built with `build` (e.g. {"M": 16, "efConstruction": 200}), and BM25 over `sparse`."""
    index = client.prepare_index_params()
    if dense_index == "FLAT":
        index.add_index("dense", index_type="FLAT", metric_type="COSINE")
    else:
        # Milvus only honours index parameters nested as params={"params": {...}}.
        index.add_index("dense", index_type=dense_index, metric_type="COSINE",
                        params={"params": dict(build if build is not None else DenseIndex().build_params(dense_index))})
    # Lucene's defaults (k1 = 1.2, b = 0.75), the setting of the published BM25 baselines.
    index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                    params={"params": {"bm25_k1": 1.2, "bm25_b": 0.75}})
    return index


def parent_schema(client: MilvusClient, *, partition_key: bool = False):
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("key", DataType.VARCHAR, is_primary=True, max_length=_key_length(partition_key))
    schema.add_field("tenant", DataType.VARCHAR, max_length=256, is_partition_key=partition_key)
    schema.add_field("namespace", DataType.VARCHAR, max_length=256)
    schema.add_field("source_id", DataType.VARCHAR, max_length=MAX_ID)
    schema.add_field("title", DataType.VARCHAR, max_length=MAX_SHORT)
    schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT)
    schema.add_field("content_hash", DataType.VARCHAR, max_length=80)
    schema.add_field("metadata", DataType.JSON)
    # Milvus refuses a collection without a vector field; parents are only ever fetched by key.
    schema.add_field("placeholder", DataType.FLOAT_VECTOR, dim=2)
    return schema


def parent_index(client: MilvusClient):
    index = client.prepare_index_params()
    index.add_index("placeholder", index_type="FLAT", metric_type="L2")
    return index


def _key_length(shared: bool) -> int:
    return MAX_ID + TENANT_PREFIX if shared else MAX_ID


# -- record collections (token vectors, conversation turns, link edges) ----------------------
# Rows read only by filter or id. Milvus refuses a collection without a vector field, so each
# carries a 2-dimensional placeholder with a FLAT index that no search ever uses.

def add_placeholder_vector(schema) -> None:
    schema.add_field("placeholder", DataType.FLOAT_VECTOR, dim=2)


def placeholder_index(client: MilvusClient):
    index = client.prepare_index_params()
    index.add_index("placeholder", index_type="FLAT", metric_type="L2")
    return index
