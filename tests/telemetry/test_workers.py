"""/metrics of `gateway serve --workers 2`: one view of the whole server, whichever worker answers."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, _free_port
from tests.serving import wait_ready

LIST = "{ collections { name } }"
COUNTER = 'gateway_requests_total{code="OK",operation="query:collections",tenant="acme"}'


def _scrape(url: str) -> str:
    # A fresh connection each time: uvicorn's workers share the listening socket, so either may answer.
    with httpx.Client(base_url=url, timeout=30, headers={"Connection": "close"}) as client:
        answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    return answer.text


def _value(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def _send(url: str, count: int) -> set[int]:
    """`count` GraphQL requests, each on its own connection; the pids of the workers that answered."""
    pids = set()
    for _ in range(count):
        with httpx.Client(base_url=url, timeout=60, headers={"Authorization": "Bearer demo-acme-reader"}) as client:
            pids.add(client.get("/readyz").json()["pid"])
            assert "errors" not in client.post("/graphql", json={"query": LIST}).json()
    return pids


def _settled(url: str, expected: float) -> str:
    """A scrape once the last answered request is counted (it is counted just after its answer is sent)."""
    for _ in range(200):
        text = _scrape(url)
        if _value(text, COUNTER) == expected:
            return text
        time.sleep(0.02)
    return text


def _worker_pids(text: str) -> dict[str, int]:
    return {worker: int(pid) for pid, worker in
            re.findall(r'gateway_process_resident_memory_bytes\{pid="(\d+)",worker="([\w-]+)"\}', text)}


@pytest.fixture
def two_workers(tmp_path: Path):
    port = _free_port()
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(tmp_path / "data" / "gateway.db"),
           "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), "GATEWAY_INGEST_DEMO_ON_START": "false"}
    serve = subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve", "--workers", "2",
                              "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, serve, timeout_s=240)
        yield url, serve
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()


def test_every_scrape_of_two_workers_counts_every_request_and_a_killed_worker_shows(two_workers):
    url, serve = two_workers
    answered_by = _send(url, 30)
    assert len(answered_by) == 2, answered_by  # both workers served some of the requests
    first = _settled(url, 30)
    # Before: each worker counted its own requests, and successive scrapes read e.g. 17, 13, 17, 13.
    seen = [_value(_scrape(url), COUNTER) for _ in range(30)]
    assert seen == [30.0] * 30, seen

    for worker in ("0", "1"):
        assert _value(first, f'gateway_worker_up{{worker="{worker}"}}') == 1.0
        assert _value(first, f'gateway_worker_restarts_total{{worker="{worker}"}}') == 0.0
    pids = _worker_pids(first)
    assert set(pids) == {"supervisor", "0", "1", "milvus-lite"} and pids["supervisor"] == serve.pid, pids
    assert {pids["0"], pids["1"]} == answered_by
    for worker, pid in pids.items():
        labels = f'{{pid="{pid}",worker="{worker}"}}'
        assert _value(first, f"gateway_process_resident_memory_bytes{labels}") > 10_000_000
        assert _value(first, f"gateway_process_open_fds{labels}") > 3
        assert _value(first, f"gateway_process_cpu_seconds_total{labels}") > 0
    # The parent's private directory of metrics sockets, as its workers were told.
    hub = Path(dict(line.split("=", 1) for line in
                    Path(f"/proc/{pids['0']}/environ").read_text().split("\0") if "=" in line)["GATEWAY_METRICS_HUB"])
    assert stat.S_IMODE(hub.stat().st_mode) == 0o700

    os.kill(pids["0"], signal.SIGKILL)
    counts, up = [], []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        text = _scrape(url)
        counts.append(_value(text, COUNTER))
        up.append(_value(text, 'gateway_worker_up{worker="0"}'))
        if _value(text, 'gateway_worker_restarts_total{worker="0"}') == 1.0 and up[-1] == 1.0:
            break
        time.sleep(0.1)
    assert 0.0 in up, up  # the dead worker shows as down until its replacement serves
    assert up[-1] == 1.0, "the replacement of worker 0 never served"
    assert set(counts) == {30.0}, counts  # its requests are still counted: the counter never goes back
    assert _worker_pids(text)["0"] != pids["0"]

    _send(url, 10)
    assert _value(_settled(url, 40), COUNTER) == 40.0
    assert {_value(_scrape(url), COUNTER) for _ in range(10)} == {40.0}

    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=60) == 0
    assert not hub.exists()  # removed on exit
    # Access lines name the worker that served each request; the scrapes and probes above have none.
    access = [json.loads(line.split("gateway.access: ", 1)[1]) for line in serve.stderr.read().splitlines()
              if "gateway.access: " in line]
    assert {line["path"] for line in access} == {"/graphql"}
    assert {line["worker"] for line in access} == {"0", "1"} and len(access) == 40


def test_a_rolling_restart_keeps_the_counts_and_reports_the_new_workers(two_workers):
    url, serve = two_workers
    _send(url, 6)
    before = _worker_pids(_settled(url, 6))
    serve.send_signal(signal.SIGHUP)  # uvicorn: replace each worker, the new one serving before the old stops
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        text = _scrape(url)
        assert _value(text, COUNTER) == 6.0
        now = _worker_pids(text)
        if all(now[w] != before[w] for w in ("0", "1")) and all(
                _value(text, f'gateway_worker_up{{worker="{w}"}}') == 1.0 for w in ("0", "1")):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the workers were not replaced: {before} -> {now}")
    for worker in ("0", "1"):  # replaced on request, not after dying
        assert _value(text, f'gateway_worker_restarts_total{{worker="{worker}"}}') == 0.0
    _send(url, 2)
    assert _value(_settled(url, 8), COUNTER) == 8.0
