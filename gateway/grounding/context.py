"""The `context` block: hits rendered as a prompt section a model can cite from.

    ## Retrieved Context (how do refunds work?)
    - [billing/refunds.md/0] (support/docs · rank 1 · score 0.0328) Refunds go back to ...

Each line starts with the citation marker that `validateCitations` checks, then the collection,
the hit's rank and its score with three significant digits, so rank-fused scores (RRF gives
0.0328, 0.0323, ...) stay distinguishable. A budget in characters is a hard bound on the whole
block, header and notes included: content is cut at a word, never a marker; a line whose marker and
label do not fit is left out, and a last line says how many (room for it is kept whenever not
every hit fits whole). What was cut is also returned as counts (`RenderedContext`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import InvalidInput, NoEvidence
from gateway.grounding.citations import format_marker
from gateway.retrieval.hit import Hit

# An estimate for budgets given in tokens: English prose runs about 4 characters a token in the
# WordPiece and BPE vocabularies of common models.
CHARS_PER_TOKEN = 4
ELLIPSIS = "…"
HEADER = "## Retrieved Context ({})"
# The smallest budget: the header with its query cut to an ellipsis, a line break and the note for
# up to 9,999 hits left out ("(9999 more hits left out by the budget)"). Anything less could not
# say what it left out.
MIN_CHARS = len(HEADER.format(ELLIPSIS)) + 1 + len("(9999 more hits left out by the budget)")
MIN_TOKENS = -(-MIN_CHARS // CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class RenderedContext:
    text: str
    left_out: int = 0    # hits with no line in the block
    shortened: int = 0   # hits whose content was cut to fit


def marker(hit: Hit) -> str:
    """The hit's citation marker, escaped as `validateCitations` reads it (see `format_marker`)."""
    return format_marker(hit.source_id, hit.chunk_id)


def render_context(query: str, hits: Sequence[Hit], *, max_chars: int | None = None,
                   max_tokens: int | None = None, reasons: Sequence[str] = ()) -> RenderedContext:
    """The block for `hits`, never longer than the budget; NoEvidence when there are none (with the
    trace's reasons, if any)."""
    if not hits:
        why = f" ({'; '.join(reasons)})" if reasons else ""
        raise NoEvidence(f"no evidence was found for {_shown(query)}{why}; there is nothing to render")
    budget = _budget(max_chars, max_tokens)
    whole = _render(query, hits, None)
    if budget is None or len(whole.text) <= budget:
        return whole
    # Not everything fits whole: keep room for the note of hits left out.
    rendered = _render(query, hits, budget - 1 - len(_note(len(hits))))
    if not rendered.left_out:
        return rendered
    return RenderedContext(f"{rendered.text}\n{_note(rendered.left_out)}", rendered.left_out, rendered.shortened)


def _render(query: str, hits: Sequence[Hit], budget: int | None) -> RenderedContext:
    header = HEADER.format(" ".join(query.split()))
    if budget is not None and len(header) > budget:
        header = HEADER.format(_cut(" ".join(query.split()), budget - len(HEADER.format(""))))
    lines = [header]
    used, shortened = len(header), 0
    for hit in hits:
        label = f"- {marker(hit)} ({hit.namespace}/{hit.collection} · rank {len(lines)} · score {hit.score:.3g}) "
        content = " ".join(hit.content.split())
        room = None if budget is None else budget - used - 1  # 1 for the line break
        if room is not None and room < len(label) + 1:
            break
        if room is not None and len(label) + len(content) > room:
            content = _cut(content, room - len(label))
            shortened += 1
        lines.append(label + content)
        used += 1 + len(lines[-1])
    return RenderedContext("\n".join(lines), len(hits) - (len(lines) - 1), shortened)


def _note(left_out: int) -> str:
    return f"({left_out} more hits left out by the budget)"


def _budget(max_chars: int | None, max_tokens: int | None) -> int | None:
    for name, value, least in (("maxChars", max_chars, MIN_CHARS), ("maxTokens", max_tokens, MIN_TOKENS)):
        if value is not None and value < least:
            raise InvalidInput(f"{name} is {value}; it must be at least {least} (the block's header and its "
                               "note of hits left out must fit)")
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
