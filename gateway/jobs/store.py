"""Ingest job state stored in Milvus: one record collection per tenant, like conversation turns.

Jobs live in Milvus, not in the process that runs them, so `job(id)` answers on every worker of
`gateway serve --workers N` and on every replica in front of one Milvus. Each save inserts a new
version row (`<job id>/<version>`) and deletes the older ones: a reader between the two sees
both and takes the newest. The collection's physical name includes the tenant and every read
goes through `MilvusStore._boundary`, so another tenant's job id is simply not found.

A job whose process died stops saving progress; a queued or running job not saved for
`STALE_MS` is reported as failed (its process stopped), so it never holds a tenant's job slot.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from enum import StrEnum

from pymilvus import DataType

from gateway.storage.filters import literal
from gateway.storage.milvus import MilvusStore
from gateway.storage.schema import Scope, add_placeholder_vector, physical_name, placeholder_index

# A namespace no tenant file can name (names start with a letter or digit).
NAMESPACE = "_jobs"
_FIELDS = ["id", "job_id", "version", "state", "namespace_name", "collection", "total", "done",
           "chunks_written", "chunks_unchanged", "errors", "created_at", "updated_at", "expires_at"]
# Progress is saved after every window of documents (JOB_WINDOW in jobs/runner.py), which takes
# seconds; ten minutes without a save means the process running the job is gone.
STALE_MS = 10 * 60 * 1000
# Finished jobs stay readable this long.
KEEP_MS = 7 * 24 * 3600 * 1000
# Errors kept per job (each unreadable upload is one); the count of the rest is added.
MAX_ERRORS = 50
_ERROR_CHARS = 1000


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)


@dataclass(frozen=True, slots=True)
class Job:
    """One ingest job of a tenant: where it writes, how far it got, and what went wrong."""

    id: str
    namespace: str
    collection: str
    state: JobState
    total: int                 # documents (and uploaded files) to ingest
    done: int = 0              # documents processed so far
    chunks_written: int = 0
    chunks_unchanged: int = 0
    errors: tuple[str, ...] = ()
    created_ms: int = 0
    updated_ms: int = 0
    version: int = 0

    @property
    def percent(self) -> float:
        if self.state is JobState.SUCCEEDED or self.total == 0:
            return 100.0 if self.state is JobState.SUCCEEDED else 0.0
        return round(100.0 * min(self.done, self.total) / self.total, 1)


def scope(tenant: str) -> Scope:
    return Scope(tenant, NAMESPACE, "jobs")


def _schema(client):
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
    schema.add_field("tenant", DataType.VARCHAR, max_length=256)
    schema.add_field("namespace", DataType.VARCHAR, max_length=256)
    schema.add_field("job_id", DataType.VARCHAR, max_length=64)
    schema.add_field("version", DataType.INT64)
    schema.add_field("state", DataType.VARCHAR, max_length=16)
    # The job's target (`namespace` is the record scope's own, `_jobs`).
    schema.add_field("namespace_name", DataType.VARCHAR, max_length=256)
    schema.add_field("collection", DataType.VARCHAR, max_length=256)
    schema.add_field("total", DataType.INT64)
    schema.add_field("done", DataType.INT64)
    schema.add_field("chunks_written", DataType.INT64)
    schema.add_field("chunks_unchanged", DataType.INT64)
    schema.add_field("errors", DataType.JSON)
    schema.add_field("created_at", DataType.INT64)
    schema.add_field("updated_at", DataType.INT64)
    schema.add_field("expires_at", DataType.INT64)
    add_placeholder_vector(schema)  # rows read by filter only (storage/schema.py)
    return schema


class JobStore:
    """Save and read one tenant's jobs (blocking: call via offload)."""

    def __init__(self, store: MilvusStore, clock=time.time) -> None:
        self._store = store
        self._clock = clock

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _open(self, tenant: str) -> tuple[Scope, str]:
        where = scope(tenant)
        name = physical_name(where, "j")
        self._store.ensure_records(where, name, _schema, placeholder_index)
        return where, name

    def _exists(self, tenant: str) -> bool:
        return self._store.has_records(physical_name(scope(tenant), "j"))

    def save(self, tenant: str, job: Job) -> Job:
        """Store `job` as its newest version; returns it with its version and times set."""
        where, name = self._open(tenant)
        now = self.now_ms()
        errors = list(job.errors[:MAX_ERRORS])
        if len(job.errors) > MAX_ERRORS:
            errors.append(f"... and {len(job.errors) - MAX_ERRORS} more")
        saved = replace(job, version=job.version + 1, updated_ms=now, created_ms=job.created_ms or now,
                        errors=tuple(e[:_ERROR_CHARS] for e in errors))
        self._store.insert_records(where, name, [{
            "id": f"{saved.id}/{saved.version:09d}", "job_id": saved.id, "version": saved.version,
            "state": saved.state.value, "namespace_name": saved.namespace, "collection": saved.collection,
            "total": saved.total, "done": saved.done, "chunks_written": saved.chunks_written,
            "chunks_unchanged": saved.chunks_unchanged, "errors": list(saved.errors),
            "created_at": saved.created_ms, "updated_at": now, "expires_at": now + KEEP_MS,
            "placeholder": [0.0, 0.0]}])
        # Older versions of this job, and every tenant job past its keep time.
        self._store.delete_records(where, name, f"(job_id == {literal(saved.id)} and version < {saved.version}) "
                                                f"or expires_at <= {now}")
        return saved

    def get(self, tenant: str, job_id: str) -> Job | None:
        if not self._exists(tenant):
            return None
        where, name = self._open(tenant)
        rows = self._store.query_records(where, name, f"job_id == {literal(job_id)}", _FIELDS, limit=64)
        if not rows:
            return None
        return self._stale(_job(max(rows, key=lambda r: int(r["version"]))))

    def active(self, tenant: str) -> int:
        """Queued or running jobs of the tenant on any process (stale ones do not count)."""
        if not self._exists(tenant):
            return 0
        where, name = self._open(tenant)
        rows = self._store.query_records(where, name, f"state in [{literal(JobState.QUEUED.value)}, {literal(JobState.RUNNING.value)}] "
                                                      f"and updated_at > {self.now_ms() - STALE_MS}",
                                         ["job_id"], limit=16_384)
        return len({row["job_id"] for row in rows})

    def _stale(self, job: Job) -> Job:
        if job.state.finished or self.now_ms() - job.updated_ms <= STALE_MS:
            return job
        return replace(job, state=JobState.FAILED, errors=(*job.errors, (
            f"STORAGE_UNAVAILABLE: no progress since {job.updated_ms} (epoch ms): the gateway process running "
            f"the job stopped; start the job again (unchanged documents are skipped by their content hash)")))


def _job(row: dict) -> Job:
    errors = row.get("errors") or []
    if isinstance(errors, (str, bytes)):
        errors = json.loads(errors)
    return Job(id=row["job_id"], namespace=row["namespace_name"], collection=row["collection"],
               state=JobState(row["state"]), total=int(row["total"]), done=int(row["done"]),
               chunks_written=int(row["chunks_written"]), chunks_unchanged=int(row["chunks_unchanged"]),
               errors=tuple(str(e) for e in errors), created_ms=int(row["created_at"]),
               updated_ms=int(row["updated_at"]), version=int(row["version"]))
