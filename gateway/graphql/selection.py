"""Which stored chunk fields a `search` selection reads, so Milvus returns only those.

Each stored field a search returns costs engine CPU for every candidate (about 11 ms a search
for the twelve fields a typical query never reads). The answer is narrowed only when every hit
field selected is known here; a trace (its previews quote content) or any other field fetches
everything, so a new SearchHit or Chunk field can never come back silently empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strawberry.types.nodes import FragmentSpread, InlineFragment, SelectedField

# GraphQL SearchHit field -> the stored chunk fields it reads. A hit's identity is always fetched.
HIT_FIELDS: dict[str, tuple[str, ...]] = {
    "content": ("text",),
    "parent": ("parent_key",),
    "provenance": ("content_hash", "created_at", "updated_at", "metadata"),  # metadata: the PDF page
}
# Chunk field -> the stored chunk fields it reads.
CHUNK_FIELDS: dict[str, tuple[str, ...]] = {
    "title": ("title",),
    "metadata": ("metadata",),
    "sourceUrl": ("source_url",),
    "sourcePath": ("source_path",),
    "modality": (),  # fetched with every hit of a collection that stores it (storage/milvus.py)
}
IDENTITY = frozenset({"id", "namespace", "collection", "sourceId", "chunkId", "score", "rank", "__typename"})
# SearchResult fields that read nothing from the hits' stored fields ("groups" reads its hits').
RESULT_FIELDS = frozenset({"hits", "groups", "pageInfo", "totalCount", "__typename"})


def stored_fields(selected: Iterable[Any]) -> frozenset[str] | None:
    """The stored fields the selected `search` fields read; None for all of them."""
    needed: set[str] = set()
    for search in _fields(selected):
        for result_field in _fields(search.selections):
            if result_field.name not in RESULT_FIELDS:
                return None
            if result_field.name == "hits":
                hit_sets = [result_field.selections]
            elif result_field.name == "groups":
                hit_sets = [g.selections for g in _fields(result_field.selections) if g.name == "hits"]
            else:
                continue
            for selections in hit_sets:
                if not _read(selections, HIT_FIELDS, needed):
                    return None
    return frozenset(needed)


def _read(selections: Iterable[Any], fields: dict[str, tuple[str, ...]], needed: set[str]) -> bool:
    """Add what the selected hit (or chunk) fields read; False for a field not known here."""
    for selected in _fields(selections):
        if selected.name == "chunk" and fields is HIT_FIELDS:
            if not _read(selected.selections, CHUNK_FIELDS, needed):
                return False
        elif selected.name in fields:
            needed.update(fields[selected.name])
        elif selected.name not in IDENTITY:
            return False
    return True


def _fields(selections: Iterable[Any]) -> Iterable[SelectedField]:
    """Selected fields, with fragments (named or inline) flattened."""
    for selection in selections:
        if isinstance(selection, SelectedField):
            yield selection
        elif isinstance(selection, (FragmentSpread, InlineFragment)):
            yield from _fields(selection.selections)
