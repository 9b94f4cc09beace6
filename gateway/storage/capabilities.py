"""What the engine behind GATEWAY_MILVUS_URI can do, detected once at start-up, and the refusals.

The gateway needs one thing of every engine (the BM25 function, Milvus 2.5+) and, for tenants with
`isolation: partition_key`, a Milvus server. Detection reads the server's version: a probe that
creates collections would need write rights and leave litter on a shared cluster, and every
feature here arrived in a known release.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gateway.storage.schema import Isolation

# Releases that brought what the gateway uses (Milvus release notes): the BM25 function and
# SPARSE_INVERTED_INDEX with metric BM25 in 2.5.0, FLOAT16_VECTOR in 2.4.0, partition keys in 2.2.9,
# HNSW_SQ in 2.6.0.
BM25_SINCE = (2, 5, 0)
HNSW_SQ_SINCE = (2, 6, 0)
FLOAT16_SINCE = (2, 4, 0)
PARTITION_KEY_SINCE = (2, 2, 9)
_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


class Engine(StrEnum):
    MILVUS_LITE = "milvus-lite"  # embedded (a path), or `milvus-lite server` behind a URI
    MILVUS = "milvus"            # Milvus standalone or distributed


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the engine behind the URI can do, detected once at start-up."""

    engine: str
    version: str
    dense_index: str
    # Named partitions and partition keys, as the gateway uses them (server only, see below).
    partitions: bool
    partition_key: bool
    bm25: bool
    float16_vectors: bool
    index_types: tuple[str, ...]
    # False when the version string names no release (a managed service's own wording, say):
    # the server is then trusted to have what it is asked for, and start-up logs that it did.
    known_release: bool = True

    @property
    def is_lite(self) -> bool:
        return self.engine == Engine.MILVUS_LITE

    def describe(self) -> str:
        features = [name for name, on in (("BM25", self.bm25), ("partition key", self.partition_key),
                                          ("float16 vectors", self.float16_vectors)) if on]
        return (f"{self.engine} {self.version} (indexes: {', '.join(self.index_types)}; "
                f"{', '.join(features) or 'no optional features'})")


def detect(version: str) -> Capabilities:
    """Capabilities from `get_server_version()`: `milvus_lite-3.2.2`, `v2.5.4`, `2.6.0-rc1`..."""
    if version.startswith(("milvus_lite", "milvus-lite")):
        return lite_capabilities(version)
    match = _RELEASE.search(version)
    release = tuple(int(part or 0) for part in match.groups()) if match else None
    def since(first: tuple[int, int, int]) -> bool:
        return release is None or release >= first
    return Capabilities(
        engine=Engine.MILVUS, version=version, dense_index="HNSW", partitions=True,
        partition_key=since(PARTITION_KEY_SINCE), bm25=since(BM25_SINCE),
        float16_vectors=since(FLOAT16_SINCE), known_release=release is not None,
        index_types=("FLAT", "HNSW", *(("HNSW_SQ",) if since(HNSW_SQ_SINCE) else ()), "IVF_FLAT", "IVF_SQ8",
                     "SPARSE_INVERTED_INDEX"))


def lite_capabilities(version: str = "milvus_lite") -> Capabilities:
    """milvus-lite, as the gateway uses it.

    milvus-lite 3.2.2 does create partition-key collections (tried: 16 `_pk_*` partitions), but it
    searches by scanning a collection with FAISS FLAT, so a shared collection makes every small
    tenant pay for every other tenant's rows, and one process holds it anyway: the gateway
    keeps one collection per tenant there. It has no FLOAT16_VECTOR type. Its own choice of dense
    index is FLAT (exact); it also builds FAISS HNSW, HNSW_SQ, IVF_FLAT and IVF_SQ8 (faiss-cpu is
    its dependency), per segment, which a collection's `index:` asks for (storage/indexes.py).
    """
    return Capabilities(engine=Engine.MILVUS_LITE, version=version, dense_index="FLAT", partitions=False,
                        partition_key=False, bm25=True, float16_vectors=False,
                        index_types=("FLAT", "HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8", "SPARSE_INVERTED_INDEX"))


def capability_problems(capabilities: Capabilities, isolation: Mapping[str, Isolation], *,
                        uri: str, indexes: Mapping[str, str] | None = None) -> list[str]:
    """Every way the tenants' configuration asks for more than the engine can do; [] when none.

    `indexes`: each collection's (`tenant/namespace/collection`) fixed dense index type, if it names one."""
    problems: list[str] = []
    for label, index_type in sorted((indexes or {}).items()):
        if index_type not in capabilities.index_types:
            allowed = ", ".join(t.lower() for t in capabilities.index_types if t != "SPARSE_INVERTED_INDEX")
            problems.append(f"collection {label!r} sets index.dense: {index_type.lower()}, which {capabilities.engine} "
                            f"{capabilities.version} at {uri!r} does not build; allowed here: auto, {allowed}")
    if not capabilities.bm25:
        problems.append(f"the Milvus server at {uri!r} is {capabilities.version}; every collection has a BM25 "
                        f"function, which needs Milvus {_dotted(BM25_SINCE)} or later: upgrade the server")
    shared = sorted(tenant for tenant, mode in isolation.items() if mode is Isolation.PARTITION_KEY)
    if shared and not capabilities.partition_key:
        where = (f"{uri!r} is milvus-lite ({capabilities.version})" if capabilities.is_lite
                 else f"the Milvus server at {uri!r} is {capabilities.version}, before {_dotted(PARTITION_KEY_SINCE)}")
        for tenant in shared:
            problems.append(f"tenant {tenant!r} sets isolation: {Isolation.PARTITION_KEY}, which needs a Milvus "
                            f"server (GATEWAY_MILVUS_URI=http://host:19530); {where}. Allowed here: isolation: "
                            f"{Isolation.COLLECTION} (the default); {Isolation.PARTITION_KEY} needs Milvus "
                            f"{_dotted(BM25_SINCE)}+ standalone or distributed")
    return problems


def _dotted(release: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in release)
