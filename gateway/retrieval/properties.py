"""The stored properties of a hit that a search can sort or facet by, read the same way for both.

A property is a top-level chunk field (`created_at`, `title`, ...), `page` (a PDF chunk's
metadata.page) or `metadata.<key>` for a key the searched collections declare
(`metadata_fields`): the same keys a filter may use, so a sort or a facet never reads a key
the tenant did not make public for filtering.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from gateway.errors import InvalidInput, allowed
from gateway.retrieval.hit import Hit
from gateway.storage.filters import METADATA_PREFIX, shown

# As tenancy/config.py declares metadata_fields: a key that can never be declared is refused at once.
_METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def metadata_key(name: str) -> str | None:
    """`key` of a well-formed `metadata.<key>`, else None."""
    if not name.startswith(METADATA_PREFIX):
        return None
    key = name[len(METADATA_PREFIX):]
    return key if _METADATA_KEY.fullmatch(key) else None


def check_declared(what: str, fields: Collection[str], metadata_keys: Collection[str]) -> None:
    """Refuse a `metadata.<key>` that not every searched collection declares."""
    for name in fields:
        key = metadata_key(name)
        if key is not None and key not in metadata_keys:
            raise InvalidInput(f"{what} field {shown(name)} is not filterable in every searched collection; "
                               f"metadata keys declared by all of them: "
                               f"{allowed(METADATA_PREFIX + k for k in metadata_keys)}")


def read(hit: Hit, field: str) -> Any:
    """The hit's value for a property (a datetime for created_at/updated_at), None when absent."""
    if field == "created_at":
        return hit.provenance.ingested_at
    if field == "updated_at":
        return hit.provenance.updated_at
    if field == "page":
        return hit.metadata.get("page")
    if field == "collection":
        return f"{hit.namespace}/{hit.collection}"
    key = metadata_key(field)
    if key is not None:
        return hit.metadata.get(key)
    return getattr(hit, field)
