"""Ingest job fields: startIngestJob answers with a job at once; job(id) reports its progress."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

import strawberry
from strawberry.types import Info

from gateway.graphql.context import Context
from gateway.graphql.inputs import DocumentInput
from gateway.ingest.formats import Unreadable
from gateway.ingest.loaders import Document, Unread, document_from_bytes
from gateway.jobs import runner
from gateway.jobs.store import Job, JobState
from gateway.retrieval.retrievers import epoch_ms_to_datetime
from gateway.storage.identifiers import check_source_id

JobStateEnum = strawberry.enum(JobState, name="JobState",
                               description="queued, running, succeeded, or failed (errors say why)")


@strawberry.input(description="A file to ingest, base64-encoded: .md, .txt, .pdf (page numbers kept in "
                              "metadata.page) or .html (main text only). sourceId defaults to the name.")
class FileInput:
    name: str
    content_base64: str
    source_id: str | None = None


@strawberry.type(description="An ingest job of the caller's tenant.")
class IngestJob:
    id: strawberry.ID
    namespace: str
    collection: str
    state: JobStateEnum  # type: ignore[valid-type]
    total: int = strawberry.field(description="Documents and files in the job.")
    done: int = strawberry.field(description="Documents and files processed so far (unreadable files count).")
    percent: float
    chunks_written: int
    chunks_unchanged: int
    errors: list[str] = strawberry.field(description="'<CODE>: <message>' per problem: each unreadable file "
                                                     "with its reason, and the failure that stopped the job.")
    created_at: datetime | None
    updated_at: datetime | None

    @classmethod
    def from_domain(cls, job: Job) -> IngestJob:
        return cls(id=strawberry.ID(job.id), namespace=job.namespace, collection=job.collection, state=job.state,
                   total=job.total, done=job.done, percent=job.percent, chunks_written=job.chunks_written,
                   chunks_unchanged=job.chunks_unchanged, errors=list(job.errors),
                   created_at=epoch_ms_to_datetime(job.created_ms), updated_at=epoch_ms_to_datetime(job.updated_ms))


def _jobs(info: Info[Context, None]) -> runner.IngestJobs:
    jobs = info.context.jobs
    assert jobs is not None, "create_app builds the job runner"
    return jobs


def files_to_documents(files: list[FileInput]) -> tuple[list[Document], list[Unread]]:
    """Each file's document, or why it has none (never skipped silently)."""
    documents: list[Document] = []
    unreadable: list[Unread] = []
    for file in files:
        source_id = file.source_id or file.name
        check_source_id(source_id)
        try:
            data = base64.b64decode(file.content_base64, validate=True)
        except (binascii.Error, ValueError):
            unreadable.append(Unread(file.name, "contentBase64 is not valid base64"))
            continue
        try:
            documents.append(document_from_bytes(file.name, data, source_id))
        except Unreadable as exc:
            unreadable.append(Unread(file.name, exc.reason))
    return documents, unreadable


@strawberry.type
class JobQuery:
    @strawberry.field(description="One ingest job of the caller's tenant, from any gateway process (writer or "
                                  "admin); another tenant's job id is UNKNOWN_JOB.")
    async def job(self, info: Info[Context, None], id: strawberry.ID) -> IngestJob:
        return IngestJob.from_domain(await _jobs(info).get(info.context.principal, str(id)))


@strawberry.type
class JobMutation:
    @strawberry.mutation(description=(
        "Start ingesting documents and/or files into one collection in the background (writer or admin) and "
        "answer at once with the job; poll job(id) for state, counts and percent. Files that cannot be read "
        "are listed in the job's errors with the reason; the rest are ingested. Idempotent like upsertDocuments."))
    async def start_ingest_job(self, info: Info[Context, None], namespace: str, collection: str,
                               documents: list[DocumentInput] | None = None,
                               files: list[FileInput] | None = None) -> IngestJob:
        from_files, unreadable = files_to_documents(files or [])
        docs = [d.to_domain() for d in documents or []] + from_files
        job = await _jobs(info).start(info.context.principal, namespace, collection, docs, unreadable)
        return IngestJob.from_domain(job)
