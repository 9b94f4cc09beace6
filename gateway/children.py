"""Python children that run this process's own code.

`python -m module` puts the current directory first on the child's path, so a child started from a
directory holding another `gateway` package (another checkout, another version) imported that one:
the store's server, a file parse or a tenant-file parse would run code other than the gateway's. A
child here starts with `-P` (nothing before the standard path) and, when this process found the
package through its own first path entry (its script's directory or the current one, which `-P`
leaves out), with the package's directory first on PYTHONPATH.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

# The directory holding the `gateway` package this process imported.
PACKAGE_ROOT = os.path.realpath(Path(__file__).resolve().parents[1])


def python_module(module: str, *args: str) -> list[str]:
    """The command of a child running `python -m module args` with this interpreter."""
    return [sys.executable, "-P", "-m", module, *args]


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (this process's environment by default), with PYTHONPATH naming the package's directory
    first unless the child's path holds it anyway (installed, or already on PYTHONPATH)."""
    env = dict(os.environ if base is None else base)
    if not any(entry and os.path.realpath(entry) == PACKAGE_ROOT for entry in sys.path[1:]):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (PACKAGE_ROOT, env.get("PYTHONPATH"))))
    return env
