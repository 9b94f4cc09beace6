"""Upload bombs and malformed files through the real HTTP app (issue 27).

startIngestJob answers at once whatever its files hold, the tenant's readers keep answering while
the job parses them, and each bomb fails its own file with the budget it broke."""

import base64
import os
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.settings import Settings
from tests.conftest import ROOT
from tests.documents import PAGE_HTML, deep_html, shared_stream_pdf, text_operators, write_pdf

START = """mutation($files: [FileInput!], $docs: [DocumentInput!]) {
  startIngestJob(namespace: "support", collection: "docs", files: $files, documents: $docs) {
    id state total done errors } }"""
JOB = "query($id: ID!) { job(id: $id) { state total done chunksWritten errors } }"
READER = "{ collections { name } }"
# Extraction of 1.5 M text operators takes seconds of CPU and breaks no byte budget: only time stops it.
SLOW = shared_stream_pdf(1, text_operators(1_500_000))
# The attacks of issue 27, under the default budgets: 103 KB inflating to 70 MB in one stream;
# 300 pages of 50 KB sharing one 2 MB stream; HTML 20,000 deep (220 KB, so all fit one 1 MiB body).
BOMBS = {"bomb.pdf": shared_stream_pdf(1, text_operators(10_000_000)),
         "shared.pdf": shared_stream_pdf(300, text_operators(300_000)),
         "deep.html": deep_html(20_000)}


def _file(name: str, data: bytes) -> dict:
    return {"name": name, "contentBase64": base64.b64encode(data).decode()}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    from tests.serving import serve

    directory = tmp_path_factory.mktemp("bombs")
    with serve(Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=ROOT / "tenants",
                        ingest_demo_on_start=False, upload_parse_seconds=2)) as served:
        # The tenant's first job creates its job collection (about a second): not what is timed here.
        warm = served.data(START, {"docs": [{"sourceId": "warm", "text": "Warm-up."}]}, key="acme-writer")
        _finished(served, warm["startIngestJob"]["id"])
        yield served


def _finished(gw, job_id: str) -> dict:
    """Poll until the job is over (a wait for completion, not a timing assertion)."""
    deadline = time.monotonic() + 180
    while True:
        job = gw.data(JOB, {"id": job_id}, key="acme-writer")["job"]
        if job["state"] in ("SUCCEEDED", "FAILED") or time.monotonic() > deadline:
            return job
        time.sleep(0.2)


def test_start_answers_at_once_and_each_bomb_fails_its_own_file(gw, tmp_path):
    manual = write_pdf(tmp_path / "manual.pdf", ["Refunds go back to the card."]).read_bytes()
    files = [_file(name, data) for name, data in BOMBS.items()] + [_file("manual.pdf", manual)]
    began = time.monotonic()
    started = gw.data(START, {"files": files}, key="acme-writer")["startIngestJob"]
    took = time.monotonic() - began
    # Before the fix the resolver parsed the files itself, on the tenant's loop, for tens of seconds.
    assert took < 1.5, f"startIngestJob took {took:.2f} s"
    assert (started["state"], started["total"], started["done"]) == ("QUEUED", 4, 0)
    job = _finished(gw, started["id"])
    assert (job["state"], job["done"], job["chunksWritten"]) == ("SUCCEEDED", 4, 1)
    assert [error.split(";")[0] for error in job["errors"]] == [
        "LIMIT_EXCEEDED: bomb.pdf: a content stream inflates to more than 67108864 bytes",
        "LIMIT_EXCEEDED: shared.pdf: its pages' content streams inflate to more than 67108864 bytes "
        "(reached at page 32 of 300)",
        "LIMIT_EXCEEDED: deep.html: its elements are nested more than 200 deep"]
    assert all("at most" in e and "(GATEWAY_UPLOAD_" in e for e in job["errors"])


def test_the_tenant_s_readers_answer_while_its_bomb_jobs_parse(gw):
    answers: list[dict] = []
    # Two starts at once, from threads: before the fix each held one of the tenant's request workers
    # (GATEWAY_TENANT_MAX_RUNNING, 2) for its whole parse, and the tenant's readers waited behind them.
    starters = [threading.Thread(target=lambda name=name: answers.append(
        gw.data(START, {"files": [_file(name, SLOW)]}, key="acme-writer"))) for name in ("slow-1.pdf", "slow-2.pdf")]
    for starter in starters:
        starter.start()
    time.sleep(0.3)
    latencies = []
    client = httpx.Client(timeout=30, headers={"Authorization": "Bearer demo-acme-reader"})
    try:
        for _ in range(20):
            began = time.monotonic()
            response = client.post(f"{gw.url}/graphql", json={"query": READER})
            latencies.append(time.monotonic() - began)
            assert response.status_code == 200 and "errors" not in response.json(), response.text[:300]
            time.sleep(0.05)
    finally:
        client.close()
        for starter in starters:
            starter.join(timeout=120)
    assert statistics.median(latencies) < 0.5 and max(latencies) < 2.0, latencies
    ids = [answer["startIngestJob"]["id"] for answer in answers]
    # The readers ran while the jobs were still parsing (each slow file takes seconds of CPU).
    assert {gw.data(JOB, {"id": i}, key="acme-writer")["job"]["state"] for i in ids} & {"QUEUED", "RUNNING"}
    for job_id in ids:
        job = _finished(gw, job_id)
        assert job["state"] == "FAILED" and len(job["errors"]) == 1, job
        assert job["errors"][0].split(";")[0].endswith("parsing it took more than 2 s of CPU time"), job


# -- adversarial: malformed uploads ------------------------------------------------------------

VALID = {"pdf": shared_stream_pdf(2, b"BT /F1 12 Tf 72 720 Td (Refunds take fourteen days.) Tj ET"),
         "html": PAGE_HTML.encode(), "md": b"# Notes\n\nInvoices are monthly.", "txt": b"Plain words."}


@st.composite
def _mangled(draw) -> tuple[str, bytes]:
    """A valid file of one format, cut, spliced with random bytes, or byte-flipped, under any suffix."""
    kind = draw(st.sampled_from(sorted(VALID)))
    data = bytearray(VALID[kind])
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["cut", "splice", "flip"]))
        if action == "cut":
            data = data[:at]
        elif action == "splice":
            data[at:at] = draw(st.binary(max_size=64))
        elif at < len(data):
            data[at] ^= draw(st.integers(1, 255))
    suffix = draw(st.sampled_from([kind, kind, "pdf", "html", "htm", "md", "txt"]))
    return f"upload.{suffix}", bytes(data)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(_mangled(), min_size=1, max_size=3), garbage=st.booleans())
def test_malformed_uploads_fail_per_file_with_a_code_and_never_internally(gw, files, garbage):
    payload = [{"name": f"{i}-{name}", "contentBase64": base64.b64encode(data).decode()}
               for i, (name, data) in enumerate(files)]
    if garbage:
        payload.append({"name": "garbage.pdf", "contentBase64": "%%% not base64 %%%"})
    started = gw.data(START, {"files": payload}, key="acme-writer")["startIngestJob"]  # the job parses, not the request
    job = _finished(gw, started["id"])
    assert job["state"] in ("SUCCEEDED", "FAILED") and job["done"] == job["total"] == len(payload)
    for error in job["errors"]:
        assert error.split(":")[0] in ("INVALID_INPUT", "LIMIT_EXCEEDED"), error
    assert job["state"] == "SUCCEEDED" or len(job["errors"]) == len(payload)


def _parse_workers() -> list[int]:
    """Pids of this process's parse workers (children running gateway.ingest.parse_worker)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid()) \
                    and b"gateway.ingest.parse_worker" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_shutdown_kills_a_parse_under_way(tmp_path):
    from tests.serving import serve

    with serve(Settings(milvus_uri=str(tmp_path / "gateway.db"), tenants_dir=ROOT / "tenants",
                        ingest_demo_on_start=False, upload_parse_seconds=600)) as gateway:
        # 30 pages sharing a 2.1 MB stream: 63 MB to parse, inside the 64 MiB budget; a minute of pypdf.
        gateway.data(START, {"files": [_file("long.pdf", shared_stream_pdf(30, text_operators(300_000)))]},
                     key="acme-writer")
        deadline = time.monotonic() + 60
        while not _parse_workers() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _parse_workers(), "the job never started its parse"
        stopping = time.monotonic()
    # The lifespan waits 10 s for jobs to finish, then kills the parse instead of waiting for it.
    assert time.monotonic() - stopping < 25
    # Killed, not finished: each page alone is over a second of CPU.
    deadline = time.monotonic() + 5
    while _parse_workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _parse_workers()
