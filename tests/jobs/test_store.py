"""Ingest job state in Milvus: versions, staleness, tenants, and another process reading it."""

import pytest

from gateway.jobs.store import STALE_MS, Job, JobState, JobStore
from gateway.storage.milvus import MilvusStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _job(job_id: str, state: JobState = JobState.QUEUED, **fields) -> Job:
    return Job(id=job_id, namespace="support", collection="docs", state=state, total=10, **fields)


def test_the_newest_version_is_read_and_older_ones_are_deleted(lite_store):
    jobs = JobStore(lite_store, Clock())
    saved = jobs.save("acme", _job("a" * 32))
    saved = jobs.save("acme", _job("a" * 32, JobState.RUNNING, done=4, version=saved.version))
    read = jobs.get("acme", "a" * 32)
    assert (read.state, read.done, read.percent, read.version) == (JobState.RUNNING, 4, 40.0, 2)
    assert jobs.active("acme") == 1
    jobs.save("acme", _job("a" * 32, JobState.SUCCEEDED, done=10, version=read.version))
    assert jobs.get("acme", "a" * 32).percent == 100.0 and jobs.active("acme") == 0


def test_another_tenant_never_reads_a_job(lite_store):
    jobs = JobStore(lite_store, Clock())
    jobs.save("acme", _job("b" * 32))
    assert jobs.get("globex", "b" * 32) is None
    assert jobs.active("globex") == 0


def test_a_job_without_progress_is_reported_failed_and_frees_its_slot(lite_store):
    clock = Clock()
    jobs = JobStore(lite_store, clock)
    jobs.save("acme", _job("c" * 32, JobState.RUNNING))
    assert jobs.active("acme") >= 1
    clock.now += STALE_MS / 1000 + 1
    stale = jobs.get("acme", "c" * 32)
    assert stale.state is JobState.FAILED and "process running the job stopped" in stale.errors[-1]
    assert jobs.active("acme") == 0


@pytest.mark.server
def test_a_job_saved_by_one_process_is_read_by_another(milvus_server):
    # Two clients of one Milvus, as two `gateway serve` workers are.
    writer, reader = MilvusStore(milvus_server), MilvusStore(milvus_server)
    try:
        JobStore(writer).save("acme", _job("d" * 32, JobState.RUNNING, done=3))
        read = JobStore(reader).get("acme", "d" * 32)
        assert (read.state, read.done) == (JobState.RUNNING, 3)
    finally:
        writer.close()
        reader.close()
