import pytest

from gateway.ingest.formats import OverBudget, ParseBudget, Unreadable, read_html, read_pdf
from tests.documents import PAGE_HTML, deep_html, shared_stream_pdf, text_operators, write_pdf


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


# -- parse budgets (uploads to ingest jobs) ----------------------------------------------------

def test_a_flate_bomb_stops_at_the_inflated_bytes_budget_before_it_is_parsed():
    bomb = shared_stream_pdf(1, text_operators(1_000_000))  # 11 KB that inflate to 7 MB
    with pytest.raises(OverBudget, match=r"a content stream inflates to more than 1000000 bytes; at most 1000000 "
                                         r"per file \(GATEWAY_UPLOAD_MAX_INFLATED_BYTES\)") as caught:
        read_pdf(bomb, ParseBudget(inflated_bytes=1_000_000))
    assert caught.value.code == "LIMIT_EXCEEDED"


def test_pages_sharing_one_stream_count_it_once_per_page():
    shared = shared_stream_pdf(300, text_operators(3000))  # one 21 KB stream, parsed by every page
    with pytest.raises(OverBudget, match=r"its pages' content streams inflate to more than 100000 bytes \(reached "
                                         r"at page 5 of 300\).*GATEWAY_UPLOAD_MAX_INFLATED_BYTES"):
        read_pdf(shared, ParseBudget(inflated_bytes=100_000))
    with pytest.raises(OverBudget, match=r"300 pages; at most 299 per file \(GATEWAY_UPLOAD_MAX_PAGES\)"):
        read_pdf(shared, ParseBudget(pages=299))


def test_extracted_text_has_a_budget(tmp_path):
    pdf = write_pdf(tmp_path / "long.pdf", ["a" * 600, "b" * 600]).read_bytes()
    with pytest.raises(OverBudget, match=r"its text is more than 1000 bytes \(reached at page 2 of 2\).*"
                                         r"GATEWAY_UPLOAD_MAX_TEXT_BYTES"):
        read_pdf(pdf, ParseBudget(text_bytes=1000))
    assert read_pdf(pdf, ParseBudget(text_bytes=1200)).pages == ("a" * 600, "b" * 600)
    with pytest.raises(OverBudget, match=r"its main text is more than 100 bytes.*GATEWAY_UPLOAD_MAX_TEXT_BYTES"):
        read_html(PAGE_HTML.encode(), ParseBudget(text_bytes=100))


def test_deeply_nested_html_stops_at_the_depth_budget():
    with pytest.raises(OverBudget, match=r"its elements are nested more than 200 deep; at most 200 per file "
                                         r"\(GATEWAY_UPLOAD_MAX_HTML_DEPTH\)"):
        read_html(deep_html(60_000), ParseBudget())
    assert "word" in read_html(deep_html(50), ParseBudget()).text


def test_files_within_their_budget_read_as_without_one(tmp_path):
    pdf = write_pdf(tmp_path / "guide.pdf", ["Refunds take 14 days.", "Invoices are monthly."], title="Guide")
    assert read_pdf(pdf.read_bytes(), ParseBudget()) == read_pdf(pdf.read_bytes())
    assert read_html(PAGE_HTML.encode(), ParseBudget()) == read_html(PAGE_HTML.encode())
