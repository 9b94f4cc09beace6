"""Text out of PDF and HTML files: pypdf for PDFs (page by page), trafilatura for HTML.

Why these two: pypdf is pure Python (no system library, installs anywhere the gateway does)
and actively maintained; it reads the text layer, so a scanned PDF without one is reported,
not guessed at. trafilatura is a maintained main-content extractor (used for web corpora such
as Common Crawl derivatives): it drops navigation, headers, footers, scripts and cookie banners,
which a plain HTML-to-text conversion would index as if they were the page's content.

Every failure is an `Unreadable` with the reason; the caller reports it (never skips silently).
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass

PDF_SUFFIXES = frozenset({".pdf"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
_BLANK_LINES = re.compile(r"\n{2,}")


class Unreadable(Exception):
    """A file the loader cannot turn into text; `reason` says why, for the report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Extracted:
    """A file's text; `pages` (1-based page i is pages[i - 1]) for paged formats."""

    text: str
    title: str = ""
    pages: tuple[str, ...] = ()


def read_pdf(data: bytes) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    # pypdf logs every recoverable defect of a file (a wrong xref offset, ...) as a warning.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise Unreadable("the PDF is encrypted; decrypt it (e.g. `qpdf --decrypt`) and ingest the copy")
        pages = tuple(_tidy(page.extract_text() or "") for page in reader.pages)
        title = str((reader.metadata or {}).get("/Title") or "").strip()
    except Unreadable:
        raise
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise Unreadable(f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    if not pages:
        raise Unreadable("the PDF has no pages")
    if not any(pages):
        raise Unreadable(f"none of its {len(pages)} page(s) has a text layer (a scanned PDF?); "
                         "run OCR on it first (e.g. `ocrmypdf`)")
    return Extracted(text="\n\n".join(p for p in pages if p), title=title, pages=pages)


def read_html(raw: bytes) -> Extracted:
    import trafilatura

    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    # favor_recall: short pages (a help article of two paragraphs) keep their text rather than
    # being judged boilerplate; tables hold much of the content of documentation pages.
    text = trafilatura.extract(raw, include_comments=False, include_tables=True, favor_recall=True)
    if not text or not text.strip():
        raise Unreadable("no main text found in the HTML (only navigation, scripts or markup)")
    metadata = trafilatura.extract_metadata(raw)
    title = (metadata.title or "") if metadata is not None else ""
    # trafilatura ends each paragraph with one newline; the chunker cuts at blank lines.
    return Extracted(text=_BLANK_LINES.sub("\n", text.strip()).replace("\n", "\n\n"), title=title.strip())


def read_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                         "convert it to UTF-8 first") from None


def _tidy(page: str) -> str:
    return page.strip()
