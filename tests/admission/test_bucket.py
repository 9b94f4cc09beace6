import math

import pytest

from gateway.admission.bucket import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_starts_full_spends_and_says_how_long_to_wait():
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)      # one token at 2/s
    assert bucket.take(2) == pytest.approx(1.0)     # a refusal spends nothing
    clock.now += 0.5
    assert bucket.take() == 0.0


def test_bucket_refills_only_up_to_burst():
    clock = Clock()
    bucket = TokenBucket(rate=10.0, burst=5, clock=clock)
    bucket.take(5)
    clock.now += 60
    assert bucket.available == pytest.approx(5)


def test_amount_over_burst_can_never_be_spent():
    bucket = TokenBucket(rate=1.0, burst=10, clock=Clock())
    assert math.isinf(bucket.take(11))
    assert bucket.available == pytest.approx(10)


def test_give_back_returns_tokens_up_to_burst():
    bucket = TokenBucket(rate=1.0, burst=4, clock=Clock())
    bucket.take(3)
    bucket.give_back(2)
    assert bucket.available == pytest.approx(3)
    bucket.give_back(10)
    assert bucket.available == pytest.approx(4)


@pytest.mark.parametrize("rate, burst", [(0, 1), (1, 0), (-1, 5)])
def test_bucket_rejects_non_positive_settings(rate, burst):
    with pytest.raises(ValueError, match="positive rate and burst"):
        TokenBucket(rate=rate, burst=burst)
