import threading
import time

import pytest

from gateway.embedding.batching import Batcher


class Gate:
    """A pass function that records each pass and holds the first one until released."""

    def __init__(self, fail_on: str | None = None, hold_all: bool = False) -> None:
        self.passes: list[list[str]] = []
        self.running = 0
        self.most_running = 0
        self.release = threading.Event()
        self.first_started = threading.Event()
        self._lock = threading.Lock()
        self._fail_on = fail_on
        self._hold_all = hold_all

    def __call__(self, items: list[str]) -> list[str]:
        with self._lock:
            self.passes.append(list(items))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            first = len(self.passes) == 1
        if first:
            self.first_started.set()
        if first or self._hold_all:
            self.release.wait(5)
        try:
            if self._fail_on in items:
                raise ValueError(f"cannot embed {self._fail_on!r}")
            return [item.upper() for item in items]
        finally:
            with self._lock:
                self.running -= 1


def run_in_threads(batcher: Batcher, items: list[str]) -> tuple[dict[str, object], list[threading.Thread]]:
    answers: dict[str, object] = {}

    def one(item: str) -> None:
        try:
            answers[item] = batcher.run(item)
        except Exception as exc:  # noqa: BLE001 - the test reads what each caller got
            answers[item] = exc

    threads = [threading.Thread(target=one, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    return answers, threads


def wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_lone_item_runs_at_once_in_a_pass_of_its_own():
    gate = Gate()
    gate.release.set()
    batcher = Batcher(gate, parallel=1)
    assert batcher.run("a") == "A"
    assert gate.passes == [["a"]]


def test_items_that_wait_run_together_and_each_caller_gets_its_own_answer():
    gate = Gate()
    batcher = Batcher(gate, parallel=1, most=4)
    first, first_threads = run_in_threads(batcher, ["first"])
    gate.first_started.wait(5)
    answers, threads = run_in_threads(batcher, ["b", "c", "d", "e", "f", "g"])
    wait_until(lambda: batcher.waiting() == 6)
    gate.release.set()
    for thread in first_threads + threads:
        thread.join(5)
    assert first == {"first": "FIRST"}
    assert answers == {item: item.upper() for item in "bcdefg"}
    # The six waiters ran in passes of at most four, one pass at a time, in arrival order of passes.
    assert [len(p) for p in gate.passes] == [1, 4, 2]
    assert sorted(gate.passes[1] + gate.passes[2]) == list("bcdefg")
    assert gate.most_running == 1


def test_no_more_passes_run_at_once_than_allowed():
    gate = Gate(hold_all=True)
    batcher = Batcher(gate, parallel=2, most=2)
    answers, threads = run_in_threads(batcher, [f"q{i}" for i in range(10)])
    # Two passes hold their items; everything else waits for them.
    wait_until(lambda: gate.running == 2 and batcher.waiting() == 10 - sum(len(p) for p in gate.passes))
    gate.release.set()
    for thread in threads:
        thread.join(5)
    assert answers == {f"q{i}": f"Q{i}" for i in range(10)}
    assert gate.most_running <= 2
    assert all(len(p) <= 2 for p in gate.passes)
    assert batcher.waiting() == 0


def test_a_failed_pass_reaches_every_caller_in_it_and_the_next_passes_still_run():
    gate = Gate(fail_on="bad")
    batcher = Batcher(gate, parallel=1, most=3)
    first, first_threads = run_in_threads(batcher, ["first"])
    gate.first_started.wait(5)
    answers, threads = run_in_threads(batcher, ["bad", "x", "y"])
    wait_until(lambda: batcher.waiting() == 3)
    gate.release.set()
    for thread in first_threads + threads:
        thread.join(5)
    assert first == {"first": "FIRST"}
    # "bad", "x" and "y" shared one pass: all three callers get its error, none an answer.
    assert all(isinstance(answers[item], ValueError) and "cannot embed 'bad'" in str(answers[item])
               for item in ("bad", "x", "y"))
    assert batcher.run("after") == "AFTER"  # the slot was given back


def test_a_pass_must_answer_each_item():
    batcher = Batcher(lambda items: [], parallel=1)
    with pytest.raises(RuntimeError, match="a batch of 1 items got 0 answers"):
        batcher.run("a")
    with pytest.raises(RuntimeError):  # the slot was given back: the next call runs (and fails) too
        batcher.run("b")


def test_setup_mistakes_fail_at_construction():
    with pytest.raises(ValueError, match="parallel=0"):
        Batcher(lambda items: items, parallel=0)
    with pytest.raises(ValueError, match="most=0"):
        Batcher(lambda items: items, parallel=1, most=0)
