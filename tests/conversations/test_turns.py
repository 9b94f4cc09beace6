"""Conversation turns on a real milvus-lite file: order, TTL, the max_turns cap, restart, tenants."""

from gateway.conversations.turns import TurnStore
from gateway.storage.milvus import MilvusStore

DAY_MS = 86_400_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _append(turns: TurnStore, tenant: str, cid: str, number: int, *, ttl_ms: int = DAY_MS, max_turns: int = 20):
    return turns.append(tenant, cid, f"q{number}", f"q{number}", 0, [f"ns/c/s{number}/0"], number=number,
                        ttl_ms=ttl_ms, max_turns=max_turns)


def test_turns_come_back_in_order_and_the_cap_deletes_the_oldest(lite_store):
    turns = TurnStore(lite_store, Clock())
    for number in range(1, 6):
        _append(turns, "acme", "cap", number, max_turns=3)
    kept = turns.recent("acme", "cap", 10, max_turns=3)
    assert [t.turn for t in kept] == [3, 4, 5]
    assert kept[-1].hits == ("ns/c/s5/0",) and kept[-1].sources == ("ns/c/s5",)
    assert [t.turn for t in turns.recent("acme", "cap", 2, max_turns=3)] == [4, 5]


def test_expired_turns_are_never_read_and_are_deleted_on_the_next_append(lite_store):
    clock = Clock()
    turns = TurnStore(lite_store, clock)
    _append(turns, "acme", "ttl", 1, ttl_ms=1000)
    assert [t.turn for t in turns.recent("acme", "ttl", 5, 20)] == [1]
    clock.now += 2
    assert turns.recent("acme", "ttl", 5, 20) == []
    _append(turns, "acme", "ttl", 2, ttl_ms=1000)
    # Only the live turn is left to clear: the expired one went with the append.
    assert turns.clear("acme", "ttl") == 1


def test_turns_are_per_tenant_and_survive_reopening_the_store(tmp_path):
    path = str(tmp_path / "gateway.db")
    store = MilvusStore(path)
    turns = TurnStore(store, Clock())
    assert turns.recent("acme", "same-id", 5, 20) == [] and turns.clear("acme", "same-id") == 0
    assert store.guard.list_collections() == []  # reading creates nothing
    _append(turns, "acme", "same-id", 1)
    _append(turns, "globex", "same-id", 1)
    _append(turns, "globex", "same-id", 2)
    store.close()
    reopened = MilvusStore(path)
    try:
        again = TurnStore(reopened, Clock())
        assert [t.turn for t in again.recent("acme", "same-id", 5, 20)] == [1]
        assert again.clear("acme", "same-id") == 1
        assert [t.turn for t in again.recent("globex", "same-id", 5, 20)] == [1, 2]
    finally:
        reopened.close()


def test_two_processes_share_a_conversation_through_a_milvus_server(milvus_server):
    # Two clients of one server stand for two gateway processes (gateway serve --workers 2).
    first, second = MilvusStore(milvus_server), MilvusStore(milvus_server)
    try:
        clock = Clock()
        _append(TurnStore(first, clock), "acme", "shared", 1)
        other = TurnStore(second, clock)
        assert [t.query for t in other.recent("acme", "shared", 5, 20)] == ["q1"]
        _append(other, "acme", "shared", 2)
        assert [t.turn for t in TurnStore(first, clock).recent("acme", "shared", 5, 20)] == [1, 2]
        assert TurnStore(first, clock).recent("globex", "shared", 5, 20) == []
    finally:
        first.close()
        second.close()
