"""Which stored chunk fields a `search` selection reads, so Milvus returns only those.

Each stored field a search returns costs engine CPU for every candidate (about 11 ms a search
for the twelve fields a typical query never reads). The answer is narrowed only when every hit
field selected is known here; a trace (its previews quote content) or any other field fetches
everything, so a new SearchHit or Chunk field can never come back silently empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from graphql import FragmentSpreadNode
from strawberry.types.nodes import FragmentSpread, InlineFragment, SelectedField

# GraphQL SearchHit field -> the stored chunk fields it reads. A hit's identity is always fetched.
HIT_FIELDS: dict[str, tuple[str, ...]] = {
    "content": ("text",),
    "parent": ("parent_key",),
    "provenance": ("content_hash", "created_at", "updated_at", "metadata"),  # metadata: the PDF page
    "highlights": ("text",),
}
# Chunk field -> the stored chunk fields it reads.
CHUNK_FIELDS: dict[str, tuple[str, ...]] = {
    "title": ("title",),
    "metadata": ("metadata",),
    "sourceUrl": ("source_url",),
    "sourcePath": ("source_path",),
    "modality": ("modality",),  # the column, where the collection has one (text otherwise)
}
IDENTITY = frozenset({"id", "namespace", "collection", "sourceId", "chunkId", "score", "rank", "__typename"})
# SearchResult fields that read nothing from the hits' stored fields ("groups" reads its hits').
# facets come from a retrieval of their own, which fetches the fields they read.
RESULT_FIELDS = frozenset({"hits", "groups", "pageInfo", "totalCount", "facets", "__typename"})


@dataclass(frozen=True, slots=True)
class SearchSelection:
    """What a `search` field's selection asks of the search."""

    stored: frozenset[str] | None  # the stored fields it reads (None: all)
    page_info: bool  # whether it selects pageInfo (a cursor to mint)


# Keyed by the identity of the field's AST nodes, which come from the parsed-document cache and
# are the same objects for every request of one document text (kept here, so an id is never reused).
_SELECTIONS: dict[tuple[int, ...], tuple[tuple[Any, ...], SearchSelection]] = {}
_MAX_SELECTIONS = 1024


def search_selection(info: Any) -> SearchSelection:
    """`stored_fields` and whether pageInfo is selected, worked out once per document: Strawberry's
    `selected_fields` rebuilds the selection tree on every call. A selection with directives
    (@include/@skip depend on variables) is worked out every time."""
    nodes = tuple(info._raw_info.field_nodes)
    key = tuple(map(id, nodes))
    cached = _SELECTIONS.get(key)
    if cached is not None and all(a is b for a, b in zip(cached[0], nodes)):
        return cached[1]
    selected = info.selected_fields
    found = SearchSelection(stored_fields(selected), any(
        f.name == "pageInfo" for search in _fields(selected) for f in _fields(search.selections)))
    if not any(_directed(node, info._raw_info.fragments, set()) for node in nodes):
        if len(_SELECTIONS) >= _MAX_SELECTIONS:
            _SELECTIONS.clear()
        _SELECTIONS[key] = (nodes, found)
    return found


def _directed(node: Any, fragments: dict[str, Any], seen: set[str]) -> bool:
    """Whether a directive appears anywhere in the node's selection (fragments followed once)."""
    if getattr(node, "directives", None):
        return True
    if isinstance(node, FragmentSpreadNode):
        name = node.name.value
        if name in seen or name not in fragments:
            return False
        seen.add(name)
        node = fragments[name]
        if node.directives:
            return True
    selection_set = getattr(node, "selection_set", None)
    return bool(selection_set) and any(_directed(child, fragments, seen) for child in selection_set.selections)


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
