"""The parent of `serve --workers N` (gateway/supervisor.py) with real worker processes."""

from __future__ import annotations

import signal

from gateway.cli import _supervise
from gateway.lifeline import WorkerConfig
from tests.conftest import _free_port


def _hung(signum, frame):
    raise TimeoutError("the supervisor did not stop within 120 s of its workers failing")


def test_a_worker_that_fails_before_serving_stops_the_parent_and_reports_it():
    # The workers cannot import their app: uvicorn's worker exits with STARTUP_FAILURE (3) before
    # serving, as it does when the app's lifespan fails. `serve` then exits 3, not 0.
    config = WorkerConfig("tests.no_such_module:app", workers=2, host="127.0.0.1", port=_free_port(),
                          timeout_worker_healthcheck=5)
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(120)
    try:
        started = _supervise(config, 10, None)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert started is False
