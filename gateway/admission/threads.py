"""OS-level names for the gateway's threads, so `top -H`, `ps -L` and /proc show which is which.

Python's thread names stay inside the interpreter; Linux sees every thread as the process's
name. The profile benchmark (benchmarks/profile_gateway.py) reads CPU per thread kind by these
names. Linux keeps 15 bytes, so `gateway-` becomes `gw-`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_PR_SET_NAME, _PR_GET_NAME = 15, 16
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" else None


def name_native_thread(name: str | None = None) -> None:
    """Give the calling thread its OS name (its Python name by default); best effort, Linux only."""
    if _LIBC is None:
        return
    text = (name or threading.current_thread().name).replace("gateway-", "gw-", 1)
    _LIBC.prctl(_PR_SET_NAME, ctypes.c_char_p(text.encode("utf-8", "replace")[:15]), 0, 0, 0)


@contextmanager
def threads_named(name: str) -> Iterator[None]:
    """Threads started inside (by C libraries too: onnxruntime's pool) inherit the OS name `name`."""
    if _LIBC is None:
        yield
        return
    before = ctypes.create_string_buffer(16)
    _LIBC.prctl(_PR_GET_NAME, before, 0, 0, 0)
    name_native_thread(name)
    try:
        yield
    finally:
        _LIBC.prctl(_PR_SET_NAME, before, 0, 0, 0)
