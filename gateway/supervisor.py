"""The parent of `gateway serve --workers N`: uvicorn's supervisor, telling the metrics hub about workers.

uvicorn's `Multiprocess` starts the workers, pings them, and replaces one that died or hangs; this
subclass gives each worker its index (GATEWAY_WORKER_ID, kept by its replacement) and reports every
start, death and replacement to the hub (gateway/telemetry/hub.py), which turns them into
`gateway_worker_up`, `gateway_worker_restarts_total` and per-process usage series.
"""

from __future__ import annotations

import logging
import os
from socket import socket

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from gateway.telemetry.hub import HUB_ENV, WORKER_ENV, MetricsHub

logger = logging.getLogger("uvicorn.error")

# How long a rolling restart (SIGHUP) waits for each replacement to serve before it gives up and
# keeps the old worker. A new worker imports the app, opens the store and loads and verifies its
# models: seconds when the machine is idle, more beside other work, where uvicorn's 5 s health-check
# timeout made restarts give up half done. A stop (Ctrl-C, SIGTERM) still ends the wait at once.
START_TIMEOUT_S = 120.0


class Supervisor(Multiprocess):
    """`Multiprocess` whose workers know their index and whose lifecycle the metrics hub sees."""

    def __init__(self, config: Config, sockets: list[socket], hub: MetricsHub) -> None:
        super().__init__(config, sockets)
        self._hub = hub
        # Set when a worker failed before serving and the parent stopped for it: `serve` then exits
        # with EXIT_CANNOT_START, not 0, so that a service manager sees the failure.
        self.failed_to_start = False

    def _start(self, index: int, *, restart: bool = False) -> Process:
        # A spawned worker is a fresh interpreter that reads these from the environment it inherits.
        os.environ[HUB_ENV] = str(self._hub.directory)
        os.environ[WORKER_ENV] = str(index)
        process = Process(self.config, self.sockets)
        process.start()
        assert process.pid is not None
        self._hub.worker_started(str(index), process.pid, restart=restart)
        return process

    def _ended(self, index: int, process: Process) -> None:
        if process.pid is not None:
            self._hub.worker_gone(str(index), process.pid)

    def init_processes(self) -> None:
        self.processes = [self._start(index) for index in range(self.processes_num)]

    def keep_subprocess_alive(self) -> None:
        """As uvicorn's, with each death reported and the replacement counted as a restart."""
        if self.should_exit.is_set():
            return
        for index, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()  # hung, or already dead
            process.join()
            self._ended(index, process)
            if process.exitcode == STARTUP_FAILURE:
                # Failed before serving: the app, TLS or socket is broken and every restart would fail too.
                logger.error(f"Child process [{process.pid}] failed to start, stopping the parent process.")
                self.failed_to_start = True
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            logger.info(f"Child process [{process.pid}] died")
            self.processes[index] = self._start(index, restart=True)

    def restart_all(self) -> None:
        """SIGHUP: as uvicorn's, each replacement in service before its predecessor is retired."""
        for index, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self._start(index)
            if not new.wait_until_ready(max(START_TIMEOUT_S, self.config.timeout_worker_healthcheck),
                                        self.should_exit):
                new.kill()
                new.join()
                self._ended(index, new)
                if old.pid is not None:  # the old one serves on
                    self._hub.worker_started(str(index), old.pid)
                    self._hub.processes.serving(str(index), old.pid)
                if not self.should_exit.is_set():
                    logger.error(f"New child process [{new.pid}] was not ready in time; "
                                 f"keeping worker [{old.pid}] and aborting the restart.")
                return
            old.terminate()
            old.join()
            self._ended(index, old)
            self.processes[index] = new

    def handle_ttin(self) -> None:
        logger.info("Received SIGTTIN, increasing the number of processes.")
        self.processes_num += 1
        self.processes.append(self._start(len(self.processes)))

    def handle_ttou(self) -> None:
        logger.info("Received SIGTTOU, decreasing number of processes.")
        if self.processes_num <= 1:
            logger.info("Already reached one process, cannot decrease the number of processes anymore.")
            return
        self.processes_num -= 1
        process = self.processes.pop()
        process.terminate()
        process.join()
        self._ended(len(self.processes), process)

    def join_all(self) -> None:
        super().join_all()
        for index, process in enumerate(self.processes):
            self._ended(index, process)
