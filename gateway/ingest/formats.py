"""Text out of PDF and HTML files: pypdf for PDFs (page by page), trafilatura for HTML.

Why these two: pypdf is pure Python (no system library, installs anywhere the gateway does)
and actively maintained; it reads the text layer, so a scanned PDF without one is reported,
not guessed at. trafilatura is a maintained main-content extractor (used for web corpora such
as Common Crawl derivatives): it drops navigation, headers, footers, scripts and cookie banners,
which a plain HTML-to-text conversion would index as if they were the page's content.

Every failure is an `Unreadable` with the reason; the caller reports it (never skips silently).
With a `ParseBudget` (uploads to ingest jobs), a file that needs more than the budget allows is
`OverBudget`, naming the budget, its value and its setting. The budgets bound what the parse
does; the CPU time and memory they cannot see are bounded by the process parsing the file
(ingest/parsing.py).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from dataclasses import dataclass

from gateway.errors import ErrorCode

PDF_SUFFIXES = frozenset({".pdf"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
_BLANK_LINES = re.compile(r"\n{2,}")


class Unreadable(Exception):
    """A file the loader cannot turn into text; `reason` says why, for the report."""

    code = ErrorCode.INVALID_INPUT

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class OverBudget(Unreadable):
    """A file that needs more than its ParseBudget allows (pages, inflated bytes, text, depth, time, memory)."""

    code = ErrorCode.LIMIT_EXCEEDED


@dataclass(frozen=True, slots=True)
class ParseBudget:
    """What parsing one uploaded file may take (GATEWAY_UPLOAD_*; docs/operations.md).

    The defaults hold a 2,000-page manual; the attacks they stop are a 227 KB PDF whose one
    Flate stream inflates to 70 MB, 300 pages sharing one 2 MB content stream (each page's
    text extraction parses it again: 600 MB) and HTML nested 60,000 elements deep.
    """

    pages: int = 2000
    # Decoded content-stream bytes summed over pages: a stream shared by n pages counts n times.
    inflated_bytes: int = 64 * 1024 * 1024
    text_bytes: int = 8 * 1024 * 1024
    # Below libxml2's own cap (255), which drops deeper content silently.
    html_depth: int = 200
    seconds: float = 30.0
    memory_mb: int = 1024

    def exceeded(self, what: str, value: int | float, setting: str) -> OverBudget:
        return OverBudget(f"{what}; at most {value} per file (GATEWAY_UPLOAD_{setting})")


@dataclass(frozen=True, slots=True)
class Extracted:
    """A file's text; `pages` (1-based page i is pages[i - 1]) for paged formats."""

    text: str
    title: str = ""
    pages: tuple[str, ...] = ()


def read_pdf(data: bytes, budget: ParseBudget | None = None) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError, PdfReadError, PyPdfError

    # pypdf logs every recoverable defect of a file (a wrong xref offset, ...) as a warning.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        with _pypdf_limits(budget):
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted:
                raise Unreadable("the PDF is encrypted; decrypt it (e.g. `qpdf --decrypt`) and ingest the copy")
            pages = _pdf_pages(reader, budget)
            title = str((reader.metadata or {}).get("/Title") or "").strip()
    except Unreadable:
        raise
    except LimitReachedError as exc:
        if budget is None:
            raise Unreadable(f"not a readable PDF ({type(exc).__name__}: {exc})") from None
        if "while decompressing" in str(exc):
            raise budget.exceeded(f"a content stream inflates to more than {budget.inflated_bytes} bytes",
                                  budget.inflated_bytes, "MAX_INFLATED_BYTES") from None
        raise OverBudget(f"pypdf's own safety limit stopped reading it ({exc})") from None
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError,
            RecursionError) as exc:
        raise Unreadable(f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    if not pages:
        raise Unreadable("the PDF has no pages")
    if not any(pages):
        raise Unreadable(f"none of its {len(pages)} page(s) has a text layer (a scanned PDF?); "
                         "run OCR on it first (e.g. `ocrmypdf`)")
    return Extracted(text="\n\n".join(p for p in pages if p), title=title, pages=pages)


def _pdf_pages(reader, budget: ParseBudget | None) -> tuple[str, ...]:
    if budget is None:
        return tuple(_tidy(page.extract_text() or "") for page in reader.pages)
    count = len(reader.pages)
    if count > budget.pages:
        raise budget.exceeded(f"{count} pages", budget.pages, "MAX_PAGES")
    # Every page's content first: text extraction parses a page's streams again, so a stream that
    # 300 pages share costs 300 parses. Decoding is cached per stream, so counting costs one inflate.
    inflated = 0
    for number, page in enumerate(reader.pages, start=1):
        contents = page.get_contents()
        inflated += len(contents.get_data()) if contents is not None else 0
        if inflated > budget.inflated_bytes:
            raise budget.exceeded(f"its pages' content streams inflate to more than {budget.inflated_bytes} bytes "
                                  f"(reached at page {number} of {count})", budget.inflated_bytes,
                                  "MAX_INFLATED_BYTES")
    pages: list[str] = []
    text = 0
    for number, page in enumerate(reader.pages, start=1):
        pages.append(_tidy(page.extract_text() or ""))
        text += len(pages[-1].encode("utf-8", "surrogatepass"))
        if text > budget.text_bytes:
            raise budget.exceeded(f"its text is more than {budget.text_bytes} bytes (reached at page {number} "
                                  f"of {count})", budget.text_bytes, "MAX_TEXT_BYTES")
    return tuple(pages)


def _pypdf_limits(budget: ParseBudget | None):
    """pypdf's decompression limits lowered to the budget, so one stream stops inflating at it."""
    if budget is None:
        return contextlib.nullcontext()
    from pypdf import apply_configuration

    cap = budget.inflated_bytes
    return apply_configuration(zlib_maximum_output_length=cap, lzw_maximum_output_length=cap,
                               run_length_maximum_output_length=cap, brotli_maximum_output_length=cap,
                               array_based_stream_maximum_output_length=cap)


def read_html(raw: bytes, budget: ParseBudget | None = None) -> Extracted:
    import trafilatura

    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    if budget is not None:
        _check_html(raw, budget)
    # favor_recall: short pages (a help article of two paragraphs) keep their text rather than
    # being judged boilerplate; tables hold much of the content of documentation pages.
    text = trafilatura.extract(raw, include_comments=False, include_tables=True, favor_recall=True)
    if not text or not text.strip():
        raise Unreadable("no main text found in the HTML (only navigation, scripts or markup)")
    if budget is not None and len(text.encode("utf-8", "surrogatepass")) > budget.text_bytes:
        raise budget.exceeded(f"its main text is more than {budget.text_bytes} bytes", budget.text_bytes,
                              "MAX_TEXT_BYTES")
    metadata = trafilatura.extract_metadata(raw)
    title = (metadata.title or "") if metadata is not None else ""
    # trafilatura ends each paragraph with one newline; the chunker cuts at blank lines.
    return Extracted(text=_BLANK_LINES.sub("\n", text.strip()).replace("\n", "\n\n"), title=title.strip())


def _check_html(raw: bytes, budget: ParseBudget) -> None:
    """Depth on the parsed tree (libxml2, C: milliseconds for a megabyte), before trafilatura walks it."""
    from lxml import etree
    from trafilatura.utils import load_html

    tree = load_html(raw)
    if tree is None:
        return  # trafilatura finds no text in it either, and says so
    depth = deepest = 0
    for event, _ in etree.iterwalk(tree, events=("start", "end")):
        depth += 1 if event == "start" else -1
        deepest = max(deepest, depth)
        if deepest > budget.html_depth:
            raise budget.exceeded(f"its elements are nested more than {budget.html_depth} deep", budget.html_depth,
                                  "MAX_HTML_DEPTH")


def read_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                         "convert it to UTF-8 first") from None


def _tidy(page: str) -> str:
    return page.strip()
