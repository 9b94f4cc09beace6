"""Children started with `python -m` run this process's `gateway` package, never one in the current directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gateway.children import PACKAGE_ROOT, environment, python_module


def _decoy(tmp_path: Path) -> Path:
    """A directory holding another `gateway` package, which says so if imported."""
    package = tmp_path / "checkout" / "gateway"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('the decoy gateway package was imported')\n")
    (package / "children.py").write_text("raise SystemExit('the decoy gateway package was imported')\n")
    return package.parent


def test_a_module_child_started_in_a_directory_holding_another_gateway_package_runs_this_one(tmp_path):
    decoy = _decoy(tmp_path)
    plain = subprocess.run([sys.executable, "-m", "gateway.children"], cwd=decoy, capture_output=True, text=True)
    assert "decoy" in plain.stderr  # what `python -m` alone does
    child = subprocess.run(python_module("gateway.children"), cwd=decoy, env=environment(), capture_output=True,
                           text=True)
    assert child.returncode == 0, child.stderr


def test_the_child_imports_the_package_from_this_process_directory(tmp_path):
    probe = [sys.executable, "-P", "-c", "import gateway; print(gateway.__file__)"]
    found = subprocess.run(probe, cwd=_decoy(tmp_path), env=environment(), capture_output=True, text=True, check=True)
    assert os.path.realpath(found.stdout.strip()) == os.path.join(PACKAGE_ROOT, "gateway", "__init__.py")


def test_pythonpath_is_kept_after_the_package_directory(tmp_path):
    env = environment({"PYTHONPATH": str(tmp_path)})
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == str(tmp_path)
