import pytest

from gateway.ingest.formats import Unreadable, read_html, read_pdf
from tests.documents import PAGE_HTML, write_pdf


def test_pdf_text_is_read_page_by_page_with_its_title(tmp_path):
    path = write_pdf(tmp_path / "guide.pdf", ["Refunds take 14 days.", "", "Invoices are monthly."],
                     title="Billing guide")
    extracted = read_pdf(path.read_bytes())
    assert extracted.pages == ("Refunds take 14 days.", "", "Invoices are monthly.")
    assert extracted.title == "Billing guide"
    assert extracted.text == "Refunds take 14 days.\n\nInvoices are monthly."


def test_a_pdf_without_a_text_layer_or_a_damaged_one_says_why(tmp_path):
    with pytest.raises(Unreadable, match=r"none of its 2 page\(s\) has a text layer .* OCR"):
        read_pdf(write_pdf(tmp_path / "scan.pdf", ["", ""]).read_bytes())
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\nthis is not a PDF body")
    with pytest.raises(Unreadable, match="not a readable PDF"):
        read_pdf(broken.read_bytes())


def test_html_keeps_the_main_text_and_drops_navigation_footer_and_scripts(tmp_path):
    path = tmp_path / "refunds.html"
    path.write_text(PAGE_HTML)
    extracted = read_html(path.read_bytes())
    assert "Refunds are issued within 14 days" in extracted.text
    assert "Partial refunds apply to opened items." in extracted.text
    for boilerplate in ("Log in to your account", "navigation menu", "All rights reserved", "cookie banner"):
        assert boilerplate not in extracted.text
    # Paragraphs stay paragraphs (the chunker cuts at blank lines).
    assert "returned unused.\n\nContact support" in extracted.text
    assert extracted.title


def test_html_with_no_main_text_is_unreadable(tmp_path):
    path = tmp_path / "empty.html"
    path.write_text("<html><head><script>x = 1</script></head><body></body></html>")
    with pytest.raises(Unreadable, match="no main text found"):
        read_html(path.read_bytes())
