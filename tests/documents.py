"""Small real PDF and HTML files for ingest tests, written by the test (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path


def write_pdf(path: Path, pages: list[str], title: str = "") -> Path:
    """A PDF with one Helvetica text line per entry of `pages` (an empty string: a page without text).

    Written object by object with a correct xref table, so pypdf reads it without repairs.
    """
    objects: list[bytes] = []
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode() if text else b""
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    info = None
    if title:
        objects.append(f"<< /Title ({title}) >>".encode())
        info = len(objects)
    path.write_bytes(_pdf_file(objects, info))
    return path


def _pdf_file(objects: list[bytes], info: int | None = None) -> bytes:
    """Numbered objects (the first is the catalog) with a correct xref table and trailer."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    trailer = f"<< /Size {len(objects) + 1} /Root 1 0 R" + (f" /Info {info} 0 R" if info else "") + " >>"
    out += f"trailer\n{trailer}\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


PAGE_HTML = """<!doctype html><html><head><title>Refund policy | ACME</title></head><body>
<nav><a href="/">Home</a> | <a href="/pricing">Pricing</a> | <a href="/login">Log in to your account</a></nav>
<header>ACME Corp navigation menu and search box</header>
<main><h1>Refunds</h1>
<p>Refunds are issued within 14 days of a purchase when the product is returned unused.</p>
<p>Contact support with your order number to start a refund. Partial refunds apply to opened items.</p></main>
<footer>Copyright 2026 ACME. All rights reserved. Privacy policy | Terms of service</footer>
<script>var tracking = "cookie banner script";</script></body></html>"""


def text_operators(count: int) -> bytes:
    """A page content stream of `count` `(x) Tj` text-showing operators (7 bytes each)."""
    return b"BT /F1 12 Tf 72 720 Td " + b"(x) Tj " * count + b"ET"


def shared_stream_pdf(pages: int, content: bytes) -> bytes:
    """A PDF of `pages` pages that all show one Flate-compressed content stream.

    The bombs of issue 27 are this shape: one page whose stream inflates ~300x (`(x) Tj` repeated
    compresses to almost nothing), or hundreds of pages sharing one stream, which text extraction
    parses once per page.
    """
    import zlib

    compressed = zlib.compress(content, 9)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{' '.join(f'{5 + i} 0 R' for i in range(pages))}] /Count {pages} >>".encode(),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(compressed) + compressed + b"\nendstream"]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                b"/Contents 4 0 R >>"] * pages
    return _pdf_file(objects)


def deep_html(depth: int) -> bytes:
    """HTML nested `depth` <div> elements deep, with a word in each (issue 27: 60,000 deep, 880 KB)."""
    return ("<html><body>" + "<div>word " * depth + "</div>" * depth + "</body></html>").encode()
