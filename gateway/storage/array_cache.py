"""Arrays kept in the process by key, at most a number of bytes in all, least recently used out first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)


class ArrayCache(Generic[K]):
    """Read-only arrays by key, at most `max_bytes` of them in all; an array larger than that is not kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[K, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> np.ndarray | None:
        with self._lock:
            array = self._entries.get(key)
            if array is not None:
                self._entries.move_to_end(key)
            return array

    def put(self, key: K, array: np.ndarray) -> None:
        if array.nbytes > self.max_bytes:
            return
        array.setflags(write=False)  # shared by every caller that reads it
        with self._lock:
            old = self._entries.pop(key, None)
            self.bytes -= 0 if old is None else old.nbytes
            self._entries[key] = array
            self.bytes += array.nbytes
            while self.bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self.bytes -= dropped.nbytes

    def forget(self, first: object) -> None:
        """Drop every array whose key (a tuple) starts with `first`."""
        with self._lock:
            for key in [key for key in self._entries if key[0] == first]:  # type: ignore[index]
                self.bytes -= self._entries.pop(key).nbytes

    def __len__(self) -> int:
        return len(self._entries)
