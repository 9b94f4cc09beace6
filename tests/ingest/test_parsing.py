"""Uploads are parsed in a child process per file, within a budget the kernel and a timeout enforce."""

import os
import subprocess
import threading
import time

import pytest

from gateway.errors import StorageUnavailable
from gateway.ingest.formats import OverBudget, ParseBudget, Unreadable
from gateway.ingest.parsing import Parser, Upload
from tests.documents import PAGE_HTML, deep_html, shared_stream_pdf, text_operators, write_pdf

# A PDF whose text extraction takes seconds of CPU and stays inside every other budget.
SLOW = shared_stream_pdf(1, text_operators(1_500_000))


def test_pdf_and_html_uploads_parse_in_a_child_with_pages_and_titles(tmp_path):
    parser = Parser()
    pdf = write_pdf(tmp_path / "m.pdf", ["Refunds go back to the card.", "Outages are on the status page."],
                    title="Manual")
    document = parser.parse(Upload("manual.pdf", "docs/manual.pdf", pdf.read_bytes()))
    assert (document.source_id, document.title, document.pages) == (
        "docs/manual.pdf", "Manual", ("Refunds go back to the card.", "Outages are on the status page."))
    page = parser.parse(Upload("refunds.html", "refunds.html", PAGE_HTML.encode()))
    assert "Refunds are issued within 14 days" in page.text and "Log in" not in page.text
    notes = parser.parse(Upload("release-notes.md", "notes", b"Plain text, decoded in place."))
    assert (notes.text, notes.title) == ("Plain text, decoded in place.", "release notes")


def test_a_parse_child_is_in_the_servers_session_and_a_process_group_of_its_own(monkeypatch):
    """Its nice counts against the serving process only inside one session: in a session of its own
    (a scheduling group of its own under autogroup) a parse took as much CPU as the server."""
    placed = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            placed.append((os.getsid(self.pid), os.getpgid(self.pid), self.pid))

    monkeypatch.setattr("gateway.ingest.parsing.subprocess.Popen", Recorded)
    Parser().parse(Upload("refunds.html", "refunds.html", PAGE_HTML.encode()))
    [(session, group, pid)] = placed
    assert session == os.getsid(0)
    assert group == pid != os.getpgid(0)


def test_budget_errors_from_the_child_name_the_budget():
    parser = Parser(ParseBudget(inflated_bytes=1_000_000, html_depth=100))
    with pytest.raises(OverBudget, match="more than 1000000 bytes.*GATEWAY_UPLOAD_MAX_INFLATED_BYTES"):
        parser.parse(Upload("bomb.pdf", "bomb.pdf", shared_stream_pdf(1, text_operators(1_000_000))))
    with pytest.raises(OverBudget, match="nested more than 100 deep.*GATEWAY_UPLOAD_MAX_HTML_DEPTH"):
        parser.parse(Upload("deep.html", "deep.html", deep_html(60_000)))


def test_a_parse_over_its_cpu_time_is_stopped_by_the_kernel():
    parser = Parser(ParseBudget(inflated_bytes=100_000_000, seconds=1))
    started = time.monotonic()
    with pytest.raises(OverBudget, match=r"parsing it took more than 1 s of CPU time; at most 1 per file "
                                         r"\(GATEWAY_UPLOAD_PARSE_SECONDS\)"):
        parser.parse(Upload("slow.pdf", "slow.pdf", SLOW))
    assert time.monotonic() - started < 10  # whole CPU seconds, start-up excluded, a loaded machine


def test_a_parse_over_its_memory_is_stopped():
    parser = Parser(ParseBudget(inflated_bytes=100_000_000, memory_mb=16))
    with pytest.raises(OverBudget, match=r"needs more than 16 MiB of memory.*GATEWAY_UPLOAD_PARSE_MEMORY_MB"):
        parser.parse(Upload("big.pdf", "big.pdf", shared_stream_pdf(1, text_operators(3_000_000))))


@pytest.mark.parametrize("name, data, reason", [
    ("empty.pdf", b"", "not a readable PDF"),
    ("junk.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 1 0 R >> endobj trailer << /Root 1 0 R >>",
     "not a readable PDF"),
    ("truncated.pdf", shared_stream_pdf(3, text_operators(10))[:300], "not a readable PDF"),
    ("binary.html", bytes(range(256)) * 8, "no main text found"),
    ("empty.html", b"", "no main text found"),
])
def test_malformed_files_are_unreadable_with_a_reason(name, data, reason):
    with pytest.raises(Unreadable, match=reason) as caught:
        Parser().parse(Upload(name, name, data))
    assert caught.value.code == "INVALID_INPUT"


def test_close_kills_a_parse_under_way_and_refuses_new_ones():
    parser = Parser(ParseBudget(inflated_bytes=100_000_000, seconds=60))
    outcome: list[BaseException] = []

    def parse() -> None:
        try:
            parser.parse(Upload("slow.pdf", "slow.pdf", SLOW))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=parse)
    thread.start()
    time.sleep(1.0)  # the child is parsing
    started = time.monotonic()
    parser.close()
    thread.join(timeout=10)
    assert not thread.is_alive() and time.monotonic() - started < 5
    assert isinstance(outcome[0], StorageUnavailable) and "stopped while parsing 'slow.pdf'" in outcome[0].message
    with pytest.raises(StorageUnavailable):
        parser.parse(Upload("next.pdf", "next.pdf", SLOW))
