"""The `context` block: hits rendered as a prompt section a model can cite from.

    ## Retrieved Context (how do refunds work?)
    - [billing/refunds.md/0] (support/docs · rank 1 · score 0.0328) Refunds go back to ...

Each line starts with the citation marker that `validateCitations` checks, then the collection,
the hit's rank and its score with three significant digits, so rank-fused scores (RRF gives
0.0328, 0.0323, ...) stay distinguishable. A budget in characters cuts content at a word, never
a marker: a line whose marker and label do not fit is left out, and a last line says how many.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import InvalidInput, NoEvidence
from gateway.retrieval.hit import Hit

# An estimate for budgets given in tokens: English prose runs about 4 characters a token in the
# WordPiece and BPE vocabularies of common models.
CHARS_PER_TOKEN = 4
ELLIPSIS = "…"


def marker(hit: Hit) -> str:
    return f"[{hit.source_id}/{hit.chunk_id}]"


def render_context(query: str, hits: Sequence[Hit], *, max_chars: int | None = None,
                   max_tokens: int | None = None, reasons: Sequence[str] = ()) -> str:
    """The block for `hits`; NoEvidence when there are none (with the trace's reasons, if any)."""
    if not hits:
        why = f" ({'; '.join(reasons)})" if reasons else ""
        raise NoEvidence(f"no evidence was found for {_shown(query)}{why}; there is nothing to render")
    budget = _budget(max_chars, max_tokens)
    lines = [f"## Retrieved Context ({' '.join(query.split())})"]
    used = len(lines[0])
    for rank, hit in enumerate(hits, start=1):
        label = f"- {marker(hit)} ({hit.namespace}/{hit.collection} · rank {rank} · score {hit.score:.3g}) "
        content = " ".join(hit.content.split())
        room = None if budget is None else budget - used - 1  # 1 for the line break
        if room is not None and room < len(label) + 1:
            lines.append(f"({len(hits) - rank + 1} more hits left out by the budget)")
            break
        if room is not None and len(label) + len(content) > room:
            content = _cut(content, room - len(label))
        lines.append(label + content)
        used += 1 + len(lines[-1])
    return "\n".join(lines)


def _budget(max_chars: int | None, max_tokens: int | None) -> int | None:
    for name, value in (("maxChars", max_chars), ("maxTokens", max_tokens)):
        if value is not None and value < 1:
            raise InvalidInput(f"{name} is {value}; it must be at least 1")
    limits = [v for v in (max_chars, None if max_tokens is None else max_tokens * CHARS_PER_TOKEN) if v]
    return min(limits) if limits else None


def _cut(text: str, room: int) -> str:
    """At most `room` characters, ending at a word boundary with an ellipsis."""
    if room <= len(ELLIPSIS):
        return ELLIPSIS if room >= 1 else ""
    head = text[:room - len(ELLIPSIS)]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head + ELLIPSIS


def _shown(query: str) -> str:
    short = " ".join(query.split())
    return repr(short if len(short) <= 80 else short[:80] + "…")
