"""A token bucket: `rate` tokens a second, at most `burst` saved up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """Starts full. `take(n)` spends n tokens, or spends nothing and says how long to wait.

    >>> bucket = TokenBucket(rate=2.0, burst=2)
    >>> bucket.take(), bucket.take(), bucket.take() > 0
    (0.0, 0.0, True)
    """

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError(f"a token bucket needs a positive rate and burst, got rate={rate}, burst={burst}")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = threading.Lock()

    def take(self, amount: float = 1.0) -> float:
        """0.0 when `amount` was spent; else the seconds until it could be (nothing is spent).

        An amount above `burst` can never be spent; the wait returned is then infinite.
        """
        with self._lock:
            self._refill()
            if amount <= self._tokens:
                self._tokens -= amount
                return 0.0
            if amount > self.burst:
                return float("inf")
            return (amount - self._tokens) / self.rate

    def give_back(self, amount: float) -> None:
        """Return tokens taken for a request that was refused later, for another reason."""
        with self._lock:
            self._tokens = min(self.burst, self._tokens + amount)

    @property
    def available(self) -> float:
        with self._lock:
            self._refill()
            return self._tokens

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
