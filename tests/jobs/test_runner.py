"""Ingest jobs run in the background on a real milvus-lite store and the real model."""

import asyncio
import threading

import pytest

from gateway.errors import Forbidden, InvalidInput, LimitExceeded, UnknownJob
from gateway.ingest.formats import ParseBudget
from gateway.ingest.loaders import Document, Unread
from gateway.ingest.parsing import Upload
from gateway.ingest.service import Writer
from gateway.jobs.runner import JOB_WINDOW, IngestJobs, JobLimits
from gateway.jobs.store import Job, JobState, JobStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role
from gateway.tenancy.loader import load_tenants
from gateway.tenancy.registry import TenantRegistry
from tests.conftest import ROOT
from tests.documents import deep_html, shared_stream_pdf, text_operators, write_pdf

WRITER = Principal("acme", Role.WRITER)


@pytest.fixture
def jobs(lite_store, embedder):
    registry = TenantRegistry(load_tenants(ROOT / "tenants"))
    return IngestJobs(Writer(registry, lite_store, embedder), JobStore(lite_store), JobLimits(per_tenant=1))


async def test_a_job_answers_at_once_and_records_progress_per_window(jobs):
    documents = [Document(f"job-doc-{i}", f"Document {i} is about topic {i}.") for i in range(JOB_WINDOW + 8)]
    started = await jobs.start(WRITER, "support", "tickets", documents, unreadable=[Unread("scan.pdf", "no text layer")])
    assert started.state is JobState.QUEUED and (started.total, started.done) == (len(documents) + 1, 1)
    await jobs.drain()
    done = await jobs.get(WRITER, started.id)
    assert (done.state, done.done, done.percent, done.chunks_written) == (
        JobState.SUCCEEDED, len(documents) + 1, 100.0, len(documents))
    assert done.errors == ("INVALID_INPUT: scan.pdf: no text layer",)
    # queued, running, one save per window of JOB_WINDOW documents, succeeded.
    assert done.version == 2 + 2 + 1


async def test_the_per_tenant_cap_counts_jobs_of_every_process(jobs, lite_store):
    # A job another worker is running, as that worker stored it.
    JobStore(lite_store).save("acme", Job(id="e" * 32, namespace="support", collection="docs",
                                          state=JobState.RUNNING, total=5))
    with pytest.raises(LimitExceeded, match=r"tenant 'acme' has 1 ingest jobs queued or running; at most 1 "
                                            r"\(GATEWAY_JOB_MAX_PER_TENANT\)"):
        await jobs.start(WRITER, "support", "docs", [Document("x", "text")])


async def test_roles_ids_and_empty_jobs_are_checked(jobs):
    with pytest.raises(Forbidden, match="role 'reader' of tenant 'globex' may not start ingest jobs"):
        await jobs.start(Principal("globex", Role.READER), "support", "docs", [Document("x", "text")])
    with pytest.raises(UnknownJob, match="is not a job id"):
        await jobs.get(WRITER, "../other")
    with pytest.raises(UnknownJob, match=r"job 'fff.*' is not a job of tenant 'acme'"):
        await jobs.get(WRITER, "f" * 32)
    with pytest.raises(InvalidInput, match="needs at least one document or file"):
        await jobs.start(WRITER, "support", "docs", [])


async def test_a_job_whose_files_are_all_unreadable_fails_at_once(jobs):
    job = await jobs.start(WRITER, "support", "docs", [], unreadable=[Unread("a.pdf", "not a readable PDF")])
    assert job.state is JobState.FAILED and job.errors == ("INVALID_INPUT: a.pdf: not a readable PDF",)
    assert jobs.pending == 0


async def test_a_job_outlives_the_deadline_and_lane_of_the_request_that_started_it(jobs):
    from gateway.admission.deadline import Deadline, deadline_scope
    from gateway.admission.scheduler import Lane, lane_scope

    deadline = Deadline(60.0)
    with lane_scope(Lane("globex", threading.current_thread())), deadline_scope(deadline):
        job = await jobs.start(Principal("globex", Role.WRITER), "support", "docs", [Document("late", "Late.")])
    deadline.cancel()  # the answer went out and the client left: the request's work is over
    await jobs.drain()
    done = await jobs.get(Principal("globex", Role.WRITER), job.id)
    assert (done.state, done.chunks_written) == (JobState.SUCCEEDED, 1)


def test_one_tenants_jobs_started_on_several_request_workers_at_once_keep_the_cap(lite_store, embedder):
    """Requests of one tenant run on different workers, each with its own event loop: the cap
    check must hold across them (a lock bound to one loop failed on the other)."""
    import concurrent.futures

    # One more job than acme has queued or running (an earlier test left one "running" in the store).
    cap = JobStore(lite_store).active("acme") + 1
    jobs = IngestJobs(Writer(TenantRegistry(load_tenants(ROOT / "tenants")), lite_store, embedder),
                      JobStore(lite_store), JobLimits(per_tenant=cap))
    gate = threading.Barrier(4)

    def on_a_loop_of_its_own(index: int):
        async def start():
            gate.wait()
            job = await jobs.start(WRITER, "support", "docs", [Document(f"w{index}", "Parallel text.")])
            await jobs.drain(timeout_s=60)  # the job runs on this loop: it ends before the loop does
            return job

        try:
            return asyncio.run(start())
        except LimitExceeded as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(on_a_loop_of_its_own, range(4)))
    started = [o for o in outcomes if isinstance(o, Job)]
    assert len(started) == 1, outcomes  # the cap left room for one job
    assert all(isinstance(o, LimitExceeded) for o in outcomes if o not in started), outcomes


class _RecordingWriter(Writer):
    """The real writer; each ingest is recorded and holds its job slot `hold_s` longer (a large job)."""

    def __init__(self, *args, hold_s: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.started: list[str] = []
        self.hold_s = hold_s

    async def ingest(self, principal, ref, documents, **kwargs):
        self.started.append(documents[0].source_id)
        await asyncio.sleep(self.hold_s)
        return await super().ingest(principal, ref, documents, **kwargs)


async def test_a_tenant_s_second_job_waits_for_another_tenant_s_first(lite_store, embedder):
    # Issue 27: one FIFO for all tenants made a one-document job wait behind another tenant's two large jobs.
    registry = TenantRegistry(load_tenants(ROOT / "tenants"))
    writer = _RecordingWriter(registry, lite_store, embedder, hold_s=0.5)
    jobs = IngestJobs(writer, JobStore(lite_store), JobLimits(per_tenant=3, concurrent=1))  # 3: an earlier test left one
    globex = Principal("globex", Role.WRITER)
    await jobs.start(WRITER, "support", "docs", [Document("acme-large-1", "First large job.")])
    await jobs.start(WRITER, "support", "docs", [Document("acme-large-2", "Second large job.")])
    await jobs.start(globex, "support", "docs", [Document("globex-small", "One small document.")])
    assert await jobs.drain(timeout_s=60)
    assert writer.started == ["acme-large-1", "globex-small", "acme-large-2"]


async def test_the_job_parses_uploads_and_a_bomb_fails_only_its_own_file(lite_store, embedder, tmp_path):
    registry = TenantRegistry(load_tenants(ROOT / "tenants"))
    budget = ParseBudget(inflated_bytes=1_000_000, html_depth=100)
    jobs = IngestJobs(Writer(registry, lite_store, embedder), JobStore(lite_store), JobLimits(parse=budget))
    manual = write_pdf(tmp_path / "manual.pdf", ["Refunds go back to the card.", "Outages are on the status page."])
    uploads = [Upload("manual.pdf", "manual.pdf", manual.read_bytes()),
               Upload("bomb.pdf", "bomb.pdf", shared_stream_pdf(1, text_operators(1_000_000))),
               Upload("shared.pdf", "shared.pdf", shared_stream_pdf(300, text_operators(3000))),
               Upload("deep.html", "deep.html", deep_html(60_000)),
               Upload("notes.md", "notes.md", b"# Notes\n\nInvoices are sent monthly.")]
    started = await jobs.start(WRITER, "support", "docs", [Document("inline", "An inline document.")], uploads)
    assert (started.state, started.total, started.done, started.errors) == (JobState.QUEUED, 6, 0, ())
    assert await jobs.drain(timeout_s=120)
    done = await jobs.get(WRITER, started.id)
    assert (done.state, done.done, done.chunks_written + done.chunks_unchanged) == (JobState.SUCCEEDED, 6, 1 + 2 + 1)
    assert done.errors == (
        "LIMIT_EXCEEDED: bomb.pdf: a content stream inflates to more than 1000000 bytes; at most 1000000 per file "
        "(GATEWAY_UPLOAD_MAX_INFLATED_BYTES)",
        "LIMIT_EXCEEDED: shared.pdf: its pages' content streams inflate to more than 1000000 bytes (reached at page "
        "48 of 300); at most 1000000 per file (GATEWAY_UPLOAD_MAX_INFLATED_BYTES)",
        "LIMIT_EXCEEDED: deep.html: its elements are nested more than 100 deep; at most 100 per file "
        "(GATEWAY_UPLOAD_MAX_HTML_DEPTH)")


async def test_a_job_of_only_unreadable_uploads_fails_with_each_file_s_reason(jobs):
    writer = Principal("globex", Role.WRITER)
    started = await jobs.start(writer, "support", "docs", [], [Upload("a.pdf", "a.pdf", b"%PDF-1.4 junk"),
                                                              Upload("b.txt", "b.txt", b"\xff\xfe")])
    assert started.state is JobState.QUEUED
    assert await jobs.drain(timeout_s=60)
    done = await jobs.get(writer, started.id)
    assert (done.state, done.done, done.total) == (JobState.FAILED, 2, 2)
    assert [e.split(" (")[0] for e in done.errors] == ["INVALID_INPUT: a.pdf: not a readable PDF",
                                                       "INVALID_INPUT: b.txt: not UTF-8 text"]
