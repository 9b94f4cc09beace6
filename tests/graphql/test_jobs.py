"""Ingest jobs over HTTP: start, poll to the end, files with page numbers, tenants and roles."""

import base64
import time

import pytest

from gateway.settings import Settings
from tests.conftest import ROOT
from tests.documents import PAGE_HTML, write_pdf

START = """mutation($docs: [DocumentInput!], $files: [FileInput!]) {
  startIngestJob(namespace: "support", collection: "docs", documents: $docs, files: $files) {
    id state total done percent errors } }"""
JOB = "query($id: ID!) { job(id: $id) { id state total done percent chunksWritten chunksUnchanged errors updatedAt } }"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    from tests.serving import serve

    directory = tmp_path_factory.mktemp("jobs")
    with serve(Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=ROOT / "tenants",
                        ingest_demo_on_start=False)) as served:
        yield served


def _finished(gw, job_id: str, key: str = "acme-writer") -> dict:
    """Poll until the job is over (a wait for completion, not a timing assertion)."""
    deadline = time.monotonic() + 120
    while True:
        job = gw.data(JOB, {"id": job_id}, key=key)["job"]
        if job["state"] in ("SUCCEEDED", "FAILED") or time.monotonic() > deadline:
            return job
        time.sleep(0.2)


def test_a_job_of_documents_and_files_reports_progress_and_unreadable_files(gw, tmp_path):
    pdf = write_pdf(tmp_path / "manual.pdf", ["Refunds go back to the card.", "Outages are on the status page."])
    files = [{"name": "manual.pdf", "contentBase64": base64.b64encode(pdf.read_bytes()).decode()},
             {"name": "refunds.html", "contentBase64": base64.b64encode(PAGE_HTML.encode()).decode()},
             {"name": "broken.pdf", "contentBase64": base64.b64encode(b"%PDF-1.4 junk").decode()},
             {"name": "notes.txt", "contentBase64": "not base64!"}]
    docs = [{"sourceId": f"doc-{i}", "text": f"Document {i} describes invoices {i}."} for i in range(40)]
    started = gw.data(START, {"docs": docs, "files": files}, key="acme-writer")["startIngestJob"]
    # Only the invalid base64 is known at once: the job parses the files.
    assert started["state"] == "QUEUED" and (started["total"], started["done"]) == (44, 1)
    job = _finished(gw, started["id"])
    assert (job["state"], job["done"], job["percent"], job["chunksWritten"]) == ("SUCCEEDED", 44, 100.0, 40 + 3)
    assert job["errors"] == ["INVALID_INPUT: notes.txt: contentBase64 is not valid base64",
                             "INVALID_INPUT: broken.pdf: not a readable PDF (" + job["errors"][1].split("(", 1)[1]]
    hits = gw.data('{ search(input: {query: "status page outages", collection: "docs", namespace: "support", limit: 1}) '
                   '{ hits { chunk { sourceId metadata } provenance { page } } } }')["search"]["hits"]
    assert hits[0]["provenance"]["page"] == 2  # the page is in the hit's provenance too
    assert (hits[0]["chunk"]["sourceId"], hits[0]["chunk"]["metadata"]["page"]) == ("manual.pdf", 2)
    source = gw.data('{ source(namespace: "support", sourceId: "manual.pdf", collection: "docs") '
                     '{ title chunks { chunkId page content } } }')["source"]
    assert [(c["chunkId"], c["page"]) for c in source["chunks"]] == [("0", 1), ("1", 2)]


def test_a_job_is_invisible_to_other_tenants_and_to_readers(gw):
    started = gw.data(START, {"docs": [{"sourceId": "solo", "text": "One document."}]},
                      key="acme-writer")["startIngestJob"]
    other = gw.error(JOB, {"id": started["id"]}, key="globex-writer")
    assert other["extensions"]["code"] == "UNKNOWN_JOB" and "is not a job of tenant 'globex'" in other["message"]
    reader = gw.error(JOB, {"id": started["id"]}, key="acme-reader")
    assert reader["extensions"]["code"] == "FORBIDDEN" and "allowed roles: writer, admin" in reader["message"]
    assert gw.error(START, {"docs": [{"sourceId": "x", "text": "y"}]}, key="acme-reader")["extensions"]["code"] \
        == "FORBIDDEN"
    assert _finished(gw, started["id"], key="acme-admin")["state"] == "SUCCEEDED"


def test_tenants_run_jobs_side_by_side(gw):
    # Each tenant's requests run on its own event loop (admission/loops.py): what jobs share is thread-safe.
    ids = {key: gw.data(START, {"docs": [{"sourceId": f"{key}-doc", "text": "Side by side."}]},
                        key=key)["startIngestJob"]["id"] for key in ("acme-writer", "globex-writer")}
    assert {key: _finished(gw, job_id, key=key)["state"] for key, job_id in ids.items()} == {
        "acme-writer": "SUCCEEDED", "globex-writer": "SUCCEEDED"}
