"""A worker ends when the process that started it dies: gracefully on SIGTERM, forcibly if it hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The worker: ignores SIGTERM (a graceful shutdown that never finishes), so only the watchdog's
# os._exit after its grace period can end it.
WORKER = """
import os, signal, sys, time
from gateway.lifeline import exit_with_parent
signal.signal(signal.SIGTERM, signal.SIG_IGN)
exit_with_parent(os.getppid(), grace_s=1.0)
print(os.getpid(), flush=True)
time.sleep(60)
"""
# Its parent: starts the worker, says its pid, then waits to be killed.
PARENT = f"""
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", {WORKER!r}], stdout=subprocess.PIPE, text=True)
print(worker.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_whose_shutdown_hangs_is_ended_after_the_grace_period_when_its_parent_dies():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    worker = int(parent.stdout.readline())
    try:
        time.sleep(0.5)
        assert _running(worker)  # alive while its parent is
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(worker)
    finally:
        if _running(worker):
            os.kill(worker, signal.SIGKILL)
