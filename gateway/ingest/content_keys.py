"""The text a chunk's vector and its BM25 index are computed from, per the collection's `content_keys`.

Each key contributes one line, in the configured order: `title` the document's title, `content` the chunk's
text, `metadata.<key>` that metadata value (a string as it is, a list of scalars joined with ', ', a number or
boolean as its JSON text). Missing and empty values contribute nothing; a chunk with none of its keys falls
back to its own text, so nothing is ever embedded or indexed empty. The default, `[title, content]`, is
the title line then the chunk's text, as every collection stored before the setting existed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

METADATA_PREFIX = "metadata."


def compose(keys: Sequence[str], *, title: str, content: str, metadata: Mapping[str, Any]) -> str:
    """The keys' values, one per line, in order; the chunk's text when none has a value."""
    lines = []
    for key in keys:
        if key == "title":
            value = title
        elif key == "content":
            value = content
        else:
            value = _rendered(metadata.get(key.removeprefix(METADATA_PREFIX)))
        if value.strip():
            lines.append(value)
    return "\n".join(lines) or content


def _rendered(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return ", ".join(v if isinstance(v, str) else json.dumps(v) for v in value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
