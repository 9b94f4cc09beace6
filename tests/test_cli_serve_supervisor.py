"""The supervising parent of `gateway serve --workers 2` stays small: it seeds the store in a
child process and imports neither the app nor a model (two real workers, one real store)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, _free_port
from tests.serving import wait_ready

# The parent measured 93 MiB of private memory with this fix, 310 MiB before it (the embedder
# and onnxruntime's arena from seeding, the GraphQL app's imports); benchmarks/memory.py.
PARENT_USS_MIB = 160


def _private_mib(pid: int) -> float:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0])
    return (fields["Private_Clean"] + fields["Private_Dirty"]) / 1024


def test_the_supervisor_of_two_workers_loads_no_model_and_no_app(tmp_path):
    port = _free_port()
    env = {**os.environ, "GATEWAY_MILVUS_URI": str(tmp_path / "data" / "gateway.db"),
           "GATEWAY_TENANTS_DIR": str(ROOT / "tenants"), "GATEWAY_INGEST_DEMO_ON_START": "true"}
    serve = subprocess.Popen([str(Path(sys.executable).parent / "gateway"), "serve", "--workers", "2",
                              "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}", serve, timeout_s=240)
        mapped = Path(f"/proc/{serve.pid}/maps").read_text()
        assert "onnxruntime" not in mapped  # no model session was ever built in the parent
        assert "tokenizers" not in mapped
        assert _private_mib(serve.pid) < PARENT_USS_MIB
    finally:
        serve.terminate()
        _, err = serve.communicate(timeout=90)
    assert serve.returncode == 0, err[-3000:]
    assert "gateway: seeded " in err  # the child seeded the store and said so
