"""Evidence read from the store: the chunks an answer's markers name, looked up by id.

With caller-supplied evidence an answer can cite a chunk it invented together with the content it
claims that chunk has. Here the evidence is what the tenant's store holds under the cited ids: the
lookup is the searcher's tenant-scoped source read, so a marker naming a source of another tenant,
or one that does not exist, finds nothing and stays UNKNOWN.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from gateway.errors import InvalidInput, LimitExceeded, UnknownSource
from gateway.grounding.citations import Evidence, cited

# Each distinct cited source is one store query; 50 is far more than an answer cites.
MAX_STORED_SOURCES = 50


class StoredText(Protocol):
    @property
    def chunk_id(self) -> str: ...

    @property
    def text(self) -> str: ...


SourceLookup = Callable[[str], Awaitable[Sequence[StoredText]]]


async def stored_evidence(answer: str, lookup: SourceLookup) -> list[Evidence]:
    """The stored chunks `answer` cites (only those), each source read once through `lookup`."""
    markers = cited(answer)
    sources = list(dict.fromkeys(source_id for source_id, _ in markers))
    if len(sources) > MAX_STORED_SOURCES:
        raise LimitExceeded(f"the answer cites {len(sources)} sources; at most {MAX_STORED_SOURCES} are "
                            "looked up in the store")
    wanted = set(markers)
    evidence: list[Evidence] = []
    for source_id in sources:
        try:
            chunks = await lookup(source_id)
        except (UnknownSource, InvalidInput):
            continue  # not a source of this tenant (or not a usable id): its markers stay UNKNOWN
        evidence.extend(Evidence(source_id, c.chunk_id, c.text) for c in chunks if (source_id, c.chunk_id) in wanted)
    return evidence
