"""Ingest job fields: startIngestJob answers with a job at once; job(id) reports its progress."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated

import strawberry
from strawberry.types import Info

from gateway.graphql.context import Context
from gateway.graphql.enums import JobStateEnum
from gateway.graphql.inputs import DocumentInput
from gateway.ingest.loaders import Unread
from gateway.ingest.parsing import Upload
from gateway.jobs import runner
from gateway.jobs.store import Job
from gateway.retrieval.retrievers import epoch_ms_to_datetime
from gateway.storage.identifiers import check_source_id


@strawberry.input(description="A file to ingest, base64-encoded: .md, .txt, .pdf (page numbers kept in "
                              "metadata.page) or .html (main text only). sourceId defaults to the name.")
class FileInput:
    name: str = strawberry.field(description=(
        "The file's name; its extension (.md, .txt, .pdf, .html) chooses how it is read"))
    content_base64: str = strawberry.field(description=(
        "The file's bytes in standard base64 (RFC 4648 section 4); invalid base64 makes the file unreadable, "
        "listed in the job's errors"))
    source_id: str | None = strawberry.field(default=None, description=(
        "The id to store the file under (1 to 512 printable characters); default: name"))


@strawberry.type(description="An ingest job of the caller's tenant.")
class IngestJob:
    id: strawberry.ID = strawberry.field(description="The job's id: pass it to job(id)")
    namespace: str = strawberry.field(description="The namespace of the collection being written")
    collection: str = strawberry.field(description="The collection being written")
    state: JobStateEnum = strawberry.field(description=(  # type: ignore[valid-type]
        "Where the job is: queued, running, succeeded or failed"))
    total: int = strawberry.field(description="Documents and files in the job.")
    done: int = strawberry.field(description="Documents and files processed so far (unreadable files count).")
    percent: float = strawberry.field(description=(
        "done / total as a percentage with one decimal, 0 to 100; 100 once SUCCEEDED"))
    chunks_written: int = strawberry.field(description="Chunks embedded and written so far (new or changed)")
    chunks_unchanged: int = strawberry.field(description=(
        "Chunks found already stored unchanged so far (not embedded again)"))
    errors: list[str] = strawberry.field(description="'<CODE>: <message>' per problem: each unreadable file "
                                                     "with its reason, and the failure that stopped the job.")
    created_at: datetime | None = strawberry.field(description="When the job was started")
    updated_at: datetime | None = strawberry.field(description=(
        "When the job last reported progress. A queued or running job that has not reported for 10 minutes is "
        "reported FAILED: its process stopped"))

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


def files_to_uploads(files: list[FileInput]) -> tuple[list[Upload], list[Unread]]:
    """Each file's bytes, or why it has none (never skipped silently). Nothing is parsed here: the
    job parses, off every request loop, so the answer comes at once whatever the files hold."""
    uploads: list[Upload] = []
    unreadable: list[Unread] = []
    for file in files:
        source_id = file.source_id or file.name
        check_source_id(source_id)
        try:
            data = base64.b64decode(file.content_base64, validate=True)
        except (binascii.Error, ValueError):
            unreadable.append(Unread(file.name, "contentBase64 is not valid base64"))
            continue
        uploads.append(Upload(file.name, source_id, data))
    return uploads, unreadable


@strawberry.type
class JobQuery:
    @strawberry.field(description="One ingest job of the caller's tenant, from any gateway process (writer or "
                                  "admin); another tenant's job id is UNKNOWN_JOB.")
    async def job(self, info: Info[Context, None],
                  id: Annotated[strawberry.ID, strawberry.argument(description="The id startIngestJob answered with")]
                  ) -> IngestJob:
        return IngestJob.from_domain(await _jobs(info).get(info.context.principal, str(id)))


@strawberry.type
class JobMutation:
    @strawberry.mutation(description=(
        "Start ingesting documents and/or files into one collection in the background (writer or admin) and "
        "answer at once with the job; poll job(id) for state, counts and percent. The job parses the files, "
        "each within per-file budgets (pages, inflated bytes, text, HTML depth, CPU time, memory): a file that "
        "cannot be read is INVALID_INPUT in the job's errors, one over a budget LIMIT_EXCEEDED, each with the "
        "reason; the rest are ingested. Idempotent like upsertDocuments."))
    async def start_ingest_job(
            self, info: Info[Context, None],
            namespace: Annotated[str, strawberry.argument(description="The namespace of the collection to write")],
            collection: Annotated[str, strawberry.argument(description=(
                "The collection to write, one of the caller's tenant"))],
            documents: Annotated[list[DocumentInput] | None, strawberry.argument(description=(
                "Documents to ingest, as upsertDocuments takes them; default: none"))] = None,
            files: Annotated[list[FileInput] | None, strawberry.argument(description=(
                "Files to ingest, base64-encoded; default: none. At least one document or file in all"))] = None
    ) -> IngestJob:
        uploads, unreadable = files_to_uploads(files or [])
        docs = [d.to_domain(i) for i, d in enumerate(documents or [])]
        job = await _jobs(info).start(info.context.principal, namespace, collection, docs, uploads, unreadable)
        return IngestJob.from_domain(job)
