"""Checks for JSON values a client sends: nesting, numbers and text every engine can store.

Used at the HTTP boundary (the request body and its variables) and for document metadata,
which ingest copies into every chunk row. Walks iteratively, so no depth can exhaust the stack.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gateway.errors import InvalidInput, LimitExceeded

# Milvus stores JSON integers as int64; a larger one fails deep inside the engine.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Lone surrogates decode from JSON escapes but cannot be encoded as UTF-8 (gRPC, logs, responses).
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def check_json(value: Any, *, where: str, max_depth: int) -> None:
    """Raise InvalidInput (bad value) or LimitExceeded (too deep) for the first problem in `value`."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict):
            if depth >= max_depth:
                raise LimitExceeded(f"{path} is nested more than {max_depth} levels deep; at most {max_depth} "
                                    "are allowed")
            for key, child in item.items():
                if not isinstance(key, str) or has_surrogate(key):
                    raise InvalidInput(f"{path} has a key that is not valid UTF-8 text: {ascii(key)[:80]}")
                stack.append((child, f"{path}.{ascii(key)[1:-1][:40]}", depth + 1))
        elif isinstance(item, list):
            if depth >= max_depth:
                raise LimitExceeded(f"{path} is nested more than {max_depth} levels deep; at most {max_depth} "
                                    "are allowed")
            stack.extend((child, f"{path}[{index}]", depth + 1) for index, child in enumerate(item))
        elif isinstance(item, str):
            if has_surrogate(item):
                raise InvalidInput(f"{path} contains a lone UTF-16 surrogate ({ascii(item)[:80]}); "
                                   "allowed: valid Unicode text")
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                raise InvalidInput(f"{path} is the integer {str(item)[:40]}, outside 64-bit range; "
                                   f"allowed: {INT64_MIN} to {INT64_MAX}")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInput(f"{path} is {item!r}; allowed: finite numbers (NaN and Infinity are not JSON)")
        else:
            raise InvalidInput(f"{path} has type {type(item).__name__}; allowed: JSON values")
