"""Arrays kept by key within a byte budget, least recently used out first."""

import numpy as np

from gateway.storage.array_cache import ArrayCache

MINE = ("acme", "docs", "tokens")


def matrix(rows: int) -> np.ndarray:
    return np.full((rows, 4), 0.5, dtype=np.float32)


def test_the_kept_matrices_stay_within_their_bytes_least_recently_used_out_first():
    cache = ArrayCache(max_bytes=3 * matrix(10).astype(np.float16).nbytes)
    keys = [(MINE, f"docs/{i}/0", "h", 512) for i in range(5)]
    for key in keys[:3]:
        cache.put(key, matrix(10).astype(np.float16))
    assert cache.get(keys[0]) is not None  # now the most recent
    cache.put(keys[3], matrix(10).astype(np.float16))
    assert cache.get(keys[1]) is None and all(cache.get(k) is not None for k in (keys[0], keys[2], keys[3]))
    assert cache.bytes <= cache.max_bytes and len(cache) == 3
    cache.put(keys[4], matrix(100).astype(np.float16))  # larger than the whole budget: not kept
    assert cache.get(keys[4]) is None and len(cache) == 3
