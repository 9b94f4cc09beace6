"""A worker process of `gateway serve --workers N` exits when the process that started it dies.

uvicorn's supervisor stops its workers on SIGTERM or Ctrl-C, but a supervisor killed with SIGKILL
(or by the OOM killer) cannot: its workers kept the shared listening socket, answered 503 once the
milvus-lite server was gone, and the next `gateway serve` met "address already in use". So each
worker asks Linux for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG: uvicorn then drains and
exits as on any SIGTERM), and a watchdog thread polls its parent pid as well: it covers a parent
that died before the prctl call, systems without prctl, and a worker whose graceful shutdown
hangs, which it ends with `os._exit` after `grace_s`.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time

import uvicorn

log = logging.getLogger("gateway")

# <linux/prctl.h>
_PR_SET_PDEATHSIG = 1
# How often the watchdog looks at its parent pid: the port is free about this long after a kill -9.
POLL_S = 0.5
# The exit code of a worker that had to be ended without a graceful shutdown (sysexits EX_SOFTWARE).
FORCED_EXIT = 70


def exit_with_parent(parent: int, *, grace_s: float) -> threading.Thread:
    """From now on, this process ends when `parent` is no longer its parent (it died).

    SIGTERM first (a graceful shutdown); `os._exit` if the process is still alive `grace_s` later.
    Returns the watchdog thread (a daemon).
    """
    _request_death_signal()
    watchdog = threading.Thread(target=_watch, args=(parent, grace_s), name="gw-parent-watch", daemon=True)
    watchdog.start()
    return watchdog


def _request_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed (errno %d); the parent watchdog alone ends this worker "
                        "if its parent dies", ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        log.warning("prctl is not available (%s); the parent watchdog alone ends this worker if its parent dies",
                    exc)


def _watch(parent: int, grace_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    log.error("the gateway's supervising process (pid %d) is gone; worker %d stops", parent, os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    log.error("worker %d did not stop within %.0f s of SIGTERM; exiting now", os.getpid(), grace_s)
    os._exit(FORCED_EXIT)


def exit_on_signal(signum: int, frame: object) -> None:
    """A signal handler that exits like a Python program: `finally` blocks, atexit and finalizers run."""
    raise SystemExit(128 + signum)


class WorkerConfig(uvicorn.Config):
    """uvicorn's Config for `serve --workers N`, whose workers exit normally after draining on SIGTERM.

    A uvicorn server drains on SIGTERM, then raises the signal again under the handler it found at
    start. In a worker that is the default handler, which kills the process there and then: no atexit,
    no multiprocessing finalizers, so the semaphore behind a progress bar's lock (tqdm) was reported
    leaked by the resource tracker at every shutdown after an ingest. `configure_logging` is the one
    hook uvicorn runs in each worker before its server starts; it also installs `exit_on_signal`.
    """

    def configure_logging(self) -> None:
        super().configure_logging()
        if multiprocessing.parent_process() is not None:
            signal.signal(signal.SIGTERM, exit_on_signal)
