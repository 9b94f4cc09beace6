"""Ingest jobs: `startIngestJob` answers with a job id at once; the ingest runs in the background.

Bounded twice: a tenant has at most `per_tenant` queued or running jobs across every process
(counted in the job store), and one process holds at most `queue` jobs (queued or running)
and runs `concurrent` of them at a time, tenants taking turns (jobs/slots.py). Beyond either
bound the start is LIMIT_EXCEEDED and nothing is stored. Progress (documents done, chunks
written) is saved after every window of JOB_WINDOW documents, so `job(id)` shows it from any worker.

Uploaded files arrive as bytes and are parsed by the job, never by the request: each PDF or HTML
file in its own process within the ParseBudget (ingest/parsing.py). A file that cannot be read or
breaks its budget is one error of the job, and the job's other files and documents go on.

A background job belongs to the process that accepted it: if that process stops, the job is
reported failed once its progress is STALE_MS old (jobs/store.py), and starting it again
re-embeds nothing that was already written (ingest is idempotent by content hash).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.admission.scheduler import offload
from gateway.errors import GatewayError, InvalidInput, LimitExceeded, UnknownJob
from gateway.ingest.formats import ParseBudget, Unreadable
from gateway.ingest.loaders import Document, Unread
from gateway.ingest.parsing import Parser, Upload
from gateway.ingest.service import UpsertLimits, Writer
from gateway.ingest.sync import IngestReport
from gateway.jobs.slots import FairSlots
from gateway.jobs.store import Job, JobState, JobStore
from gateway.settings import Settings
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import Role

log = logging.getLogger(__name__)
# Documents per committed window: progress moves at least this often (ingest's own window,
# 256, would show 0% then 100% for most uploads); each window ends with a flush.
JOB_WINDOW = 32
# While files are parsed, progress is saved at most this often (and so at least this often while
# parses keep finishing: far inside STALE_MS, even when each file takes its whole time budget).
PARSE_SAVE_S = 2.0
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")
# Locks a tenant's job cap check takes, shared by tenants that hash alike (a bounded set).
_TENANT_LOCKS = 64


@dataclass(frozen=True, slots=True)
class JobLimits:
    """GATEWAY_JOB_*: jobs per tenant (all processes), jobs per process, and one job's size."""

    per_tenant: int = 2
    queue: int = 8
    concurrent: int = 1
    upsert: UpsertLimits = UpsertLimits(documents=4096, chunks=32_768,
                                        documents_setting="GATEWAY_JOB_MAX_DOCUMENTS",
                                        chunks_setting="GATEWAY_JOB_MAX_CHUNKS")
    parse: ParseBudget = ParseBudget()


class IngestJobs:
    """Starts, runs and reports one process's ingest jobs."""

    def __init__(self, writer: Writer, store: JobStore, limits: JobLimits = JobLimits()) -> None:
        self._writer = writer
        self._store = store
        self._limits = limits
        # Requests run on several request workers, each with its own loop (admission/workers.py), so
        # everything jobs share is guarded by thread locks; a tenant's cap check and save hold one
        # of a fixed set of locks (striped by tenant: nothing here grows with the tenant count).
        self._guard = threading.Lock()
        self._slots = FairSlots(limits.concurrent)
        self._parser = Parser(limits.parse)
        self._running: set[concurrent.futures.Future[None]] = set()
        self._tenant_locks = tuple(threading.Lock() for _ in range(_TENANT_LOCKS))
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Jobs this process holds, queued or running."""
        with self._guard:
            return len(self._running)

    async def start(self, principal: Principal, namespace: str, collection: str, documents: Sequence[Document],
                    uploads: Sequence[Upload] = (), unreadable: Sequence[Unread] = ()) -> Job:
        """Check and queue a job; `uploads` are parsed by the job, so this answers at once whatever they hold."""
        principal.require(Role.WRITER, "start ingest jobs")
        ref = self._writer.resolve(principal, namespace, collection)
        errors = tuple(f"{u.code}: {u}" for u in unreadable)
        total = len(documents) + len(uploads) + len(unreadable)
        if not documents and not uploads:
            if not errors:
                raise InvalidInput("an ingest job needs at least one document or file; got none")
            # Nothing readable: the job is over before it starts, and holds no slot.
            failed = Job(id=uuid.uuid4().hex, namespace=ref.scope.namespace, collection=ref.scope.collection,
                         state=JobState.FAILED, total=total, done=total, errors=errors)
            return await offload(self._store.save, principal.tenant, failed)
        self._writer.check(ref, documents, self._limits.upsert, call="ingest job", files=len(uploads))
        finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._guard:  # a place in this process's queue, held from here to the job's end
            if len(self._running) >= self._limits.queue:
                raise LimitExceeded(f"this gateway process already holds {len(self._running)} ingest jobs; at most "
                                    f"{self._limits.queue} (GATEWAY_JOB_QUEUE_SIZE); retry when one has finished")
            self._running.add(finished)
        job = Job(id=uuid.uuid4().hex, namespace=ref.scope.namespace, collection=ref.scope.collection,
                  state=JobState.QUEUED, total=total, done=len(unreadable), errors=errors)
        try:
            job = await offload(self._queue_job, principal.tenant, job)
        except BaseException:
            self._finish(finished)
            raise
        # A fresh context: the job outlives the request, so neither its deadline nor its fair lane applies.
        task = asyncio.get_running_loop().create_task(
            self._run(principal, ref, list(documents), list(uploads), job, finished), context=contextvars.Context())
        with self._guard:  # the loop keeps only a weak reference to a task
            self._tasks.add(task)
        task.add_done_callback(self._forget)
        return job

    def _queue_job(self, tenant: str, job: Job) -> Job:
        """The tenant's cap check and the save, as one step within this process (blocking)."""
        with self._tenant_locks[hash(tenant) % _TENANT_LOCKS]:
            active = self._store.active(tenant)
            if active >= self._limits.per_tenant:
                raise LimitExceeded(f"tenant {tenant!r} has {active} ingest jobs queued or running; at most "
                                    f"{self._limits.per_tenant} (GATEWAY_JOB_MAX_PER_TENANT); wait for one to finish")
            return self._store.save(tenant, job)

    def _forget(self, task: asyncio.Task[None]) -> None:
        with self._guard:
            self._tasks.discard(task)

    def _finish(self, finished: concurrent.futures.Future[None]) -> None:
        with self._guard:
            self._running.discard(finished)
        if not finished.done():
            finished.set_result(None)

    async def get(self, principal: Principal, job_id: str) -> Job:
        principal.require(Role.WRITER, "read ingest jobs")
        if not _JOB_ID.match(job_id):
            raise UnknownJob(f"job id {job_id!r} is not a job id; allowed: the 32 hex characters startIngestJob "
                             "returned")
        job = await offload(self._store.get, principal.tenant, job_id)
        if job is None:
            raise UnknownJob(f"job {job_id!r} is not a job of tenant {principal.tenant!r} (finished jobs are kept "
                             "7 days)")
        return job

    def close(self) -> None:
        """Stop the parses under way (shutdown, after `drain`): their jobs fail, and a restart parses again."""
        self._parser.close()

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Wait for this process's jobs (shutdown, tests); False when some still run after `timeout_s`
        (they are then reported failed once stale, and a restart of the job skips what was written)."""
        with self._guard:
            pending = list(self._running)
        if not pending:
            return True
        _, running = await asyncio.to_thread(concurrent.futures.wait, pending, timeout_s)
        if running:
            log.warning("%d ingest job(s) still running at shutdown; they will be reported failed", len(running))
        return not running

    async def _run(self, principal: Principal, ref, documents: list[Document], uploads: list[Upload], job: Job,
                   finished: concurrent.futures.Future[None]) -> None:
        try:
            await self._slots.acquire(principal.tenant)  # at most `concurrent` jobs run at once, tenants in turn
            try:
                await self._ingest(principal, ref, documents, uploads, job)
            finally:
                self._slots.release()
        finally:
            self._finish(finished)

    async def _ingest(self, principal: Principal, ref, documents: list[Document], uploads: list[Upload],
                      job: Job) -> None:
        tenant = principal.tenant
        job = await offload(self._store.save, tenant, replace(job, state=JobState.RUNNING))
        latest = job
        base = 0

        def progress(report: IngestReport) -> None:  # in the ingest thread, after each window
            nonlocal latest
            latest = self._store.save(tenant, _counted(latest, report, base))

        try:
            parsed, latest = await self._parse(tenant, uploads, latest)
            documents = documents + parsed
            base = latest.done  # unreadable uploads count as done
            if not documents:  # every file was unreadable: each is in `errors`
                raise _NothingReadable()
            # Parsed text is only now known: the job's chunk bound, off the event loop.
            await asyncio.to_thread(self._writer.check, ref, documents, self._limits.upsert, "ingest job")
            report = await self._writer.ingest(principal, ref, documents, on_window=progress, window=JOB_WINDOW)
        except _NothingReadable:
            failed = replace(latest, state=JobState.FAILED)
        except GatewayError as exc:
            failed = replace(latest, state=JobState.FAILED, errors=(*latest.errors, f"{exc.code}: {exc.message}"))
        except Exception as exc:  # a job's failure is reported in the job; the process goes on
            log.exception("ingest job %s of tenant %s failed", job.id, tenant)
            failed = replace(latest, state=JobState.FAILED,
                             errors=(*latest.errors, f"INTERNAL: unexpected {type(exc).__name__}; "
                                                     "see the gateway log"))
        else:
            # Succeeded, with any unreadable files listed in `errors`: the readable ones are in.
            await offload(self._store.save, tenant, replace(_counted(latest, report, base),
                                                            state=JobState.SUCCEEDED))
            return
        try:
            await offload(self._store.save, tenant, failed)
        except GatewayError:
            log.warning("ingest job %s of tenant %s failed and its state could not be saved", job.id, tenant)

    async def _parse(self, tenant: str, uploads: list[Upload], job: Job) -> tuple[list[Document], Job]:
        """Each upload's document, in a thread (the parse itself in a child process); failures go to `errors`."""
        documents: list[Document] = []
        saved = time.monotonic()
        for upload in uploads:
            try:
                documents.append(await asyncio.to_thread(self._parser.parse, upload))
            except Unreadable as exc:
                job = replace(job, done=job.done + 1, errors=(*job.errors, f"{exc.code}: {upload.name}: {exc.reason}"))
            if time.monotonic() - saved >= PARSE_SAVE_S:
                job = await offload(self._store.save, tenant, job)
                saved = time.monotonic()
        return documents, job


class _NothingReadable(Exception):
    """No upload of a job could be read and it has no documents: it fails with the files' errors."""


def _counted(job: Job, report: IngestReport, base: int) -> Job:
    return replace(job, done=base + report.sources, chunks_written=report.chunks_written,
                   chunks_unchanged=report.chunks_unchanged)


def job_limits(settings: Settings) -> JobLimits:
    return JobLimits(per_tenant=settings.job_max_per_tenant, queue=settings.job_queue_size,
                     concurrent=settings.job_concurrency,
                     upsert=replace(JobLimits().upsert, documents=settings.job_max_documents,
                                    chunks=settings.job_max_chunks, metadata_bytes=settings.max_metadata_bytes),
                     parse=ParseBudget(pages=settings.upload_max_pages,
                                       inflated_bytes=settings.upload_max_inflated_bytes,
                                       text_bytes=settings.upload_max_text_bytes,
                                       html_depth=settings.upload_max_html_depth,
                                       seconds=settings.upload_parse_seconds,
                                       memory_mb=settings.upload_parse_memory_mb))
