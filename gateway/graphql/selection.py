"""Which stored chunk fields a `search` selection reads, so Milvus returns only those.

Each stored field a search returns costs engine CPU for every candidate (about 11 ms a search
for the twelve fields a typical query never reads). The answer is narrowed only when every hit
field selected is known here; a trace (its previews quote content) or any other field fetches
everything, so a new Hit field can never come back silently empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strawberry.types.nodes import FragmentSpread, InlineFragment, SelectedField

# GraphQL Hit field -> the stored chunk fields it reads. A hit's identity is always fetched.
HIT_FIELDS: dict[str, tuple[str, ...]] = {
    "content": ("text",),
    "title": ("title",),
    "metadata": ("metadata",),
    "sourceUrl": ("source_url",),
    "sourcePath": ("source_path",),
    "parent": ("parent_key",),
    "provenance": ("content_hash", "created_at", "updated_at"),
    "modality": (),  # fetched with every hit of a collection that stores it (storage/milvus.py)
}
IDENTITY = frozenset({"id", "namespace", "collection", "sourceId", "chunkId", "score", "__typename"})
# SearchResult fields that read nothing from the hits' stored fields.
RESULT_FIELDS = frozenset({"hits", "__typename"})


def stored_fields(selected: Iterable[Any]) -> frozenset[str] | None:
    """The stored fields the selected `search` fields read; None for all of them."""
    needed: set[str] = set()
    for search in _fields(selected):
        for result_field in _fields(search.selections):
            if result_field.name not in RESULT_FIELDS:
                return None
            if result_field.name != "hits":
                continue
            for hit_field in _fields(result_field.selections):
                if hit_field.name in HIT_FIELDS:
                    needed.update(HIT_FIELDS[hit_field.name])
                elif hit_field.name not in IDENTITY:
                    return None
    return frozenset(needed)


def _fields(selections: Iterable[Any]) -> Iterable[SelectedField]:
    """Selected fields, with fragments (named or inline) flattened."""
    for selection in selections:
        if isinstance(selection, SelectedField):
            yield selection
        elif isinstance(selection, (FragmentSpread, InlineFragment)):
            yield from _fields(selection.selections)
