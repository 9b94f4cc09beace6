"""Python hook subscribers named in the hook tests' tenant files (loaded by entry point)."""

from collections import defaultdict

SEEN: dict[str, list[dict]] = defaultdict(list)


def record_acme(event: dict) -> None:
    SEEN["acme"].append(event)


async def record_globex(event: dict) -> None:
    SEEN["globex"].append(event)


def explode(event: dict) -> None:
    raise RuntimeError("a subscriber with a bug")
