"""Automatic persisted queries and operation manifests (gateway/graphql/persisted.py)."""

import json

import pytest

from gateway.errors import (
    ConfigError,
    InvalidInput,
    OperationNotAllowed,
    PersistedQueryNotFound,
    PersistedQueryNotSupported,
)
from gateway.graphql.persisted import OperationList, PersistedQueries, sha256_hex

QUERY = "{ collections { name } }"
HASH = sha256_hex(QUERY)


def _hash_only(digest: str = HASH) -> dict:
    return {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": digest}}}


def _registering(query: str = QUERY, digest: str = HASH) -> dict:
    return {"query": query, **_hash_only(digest)}


def test_unknown_hash_is_not_found_then_registration_makes_it_resolve():
    cache = PersistedQueries(max_entries=8)
    with pytest.raises(PersistedQueryNotFound, match=HASH):
        cache.resolve("acme", _hash_only())
    assert cache.resolve("acme", _registering()) is False  # the full query runs as sent
    request = _hash_only()
    assert cache.resolve("acme", request) is True
    assert request["query"] == QUERY


def test_registrations_are_per_tenant():
    cache = PersistedQueries(max_entries=8)
    cache.resolve("acme", _registering())
    with pytest.raises(PersistedQueryNotFound):
        cache.resolve("globex", _hash_only())


def test_a_hash_that_is_not_the_querys_is_refused_naming_both():
    cache = PersistedQueries(max_entries=8)
    other = sha256_hex("{ other }")
    with pytest.raises(InvalidInput, match=f"{other} is not the sha256 of the query sent \\(that is {HASH}\\)"):
        cache.resolve("acme", _registering(digest=other))
    assert len(cache) == 0


@pytest.mark.parametrize("extension, message", [
    ({"version": 2, "sha256Hash": HASH}, "version 2 is not supported; allowed: 1"),
    ({"version": 1, "sha256Hash": "abc"}, "'abc' is not 64 hex characters"),
    ("yes", "must be an object"),
])
def test_malformed_extensions_are_invalid_input(extension, message):
    with pytest.raises(InvalidInput, match=message):
        PersistedQueries(max_entries=8).resolve("acme", {"extensions": {"persistedQuery": extension}})


def test_the_cache_is_bounded_least_recently_used_first():
    cache = PersistedQueries(max_entries=2)
    queries = [f"{{ q{i} }}" for i in range(3)]
    for query in queries:
        cache.resolve("acme", _registering(query, sha256_hex(query)))
    assert len(cache) == 2
    with pytest.raises(PersistedQueryNotFound):
        cache.resolve("acme", _hash_only(sha256_hex(queries[0])))
    assert cache.resolve("acme", _hash_only(sha256_hex(queries[2]))) is True


def test_zero_entries_means_not_supported():
    with pytest.raises(PersistedQueryNotSupported, match="GATEWAY_PERSISTED_QUERIES=0"):
        PersistedQueries(max_entries=0).resolve("acme", _hash_only())


@pytest.mark.parametrize("request_", [{"query": QUERY}, {"query": QUERY, "extensions": ["not", "an", "object"]},
                                      {"query": 7, "extensions": "text"}])
def test_requests_without_a_persisted_query_pass_untouched(request_):
    before = dict(request_)
    assert PersistedQueries(max_entries=8).resolve("acme", request_) is False  # the body checks come next
    assert request_ == before


def _manifest(tmp_path, documents, apollo=False):
    path = tmp_path / "operations.json"
    if apollo:
        body = {"format": "apollo-persisted-query-manifest", "version": 1,
                "operations": [{"id": h, "name": "Op", "type": "query", "body": d} for h, d in documents.items()]}
    else:
        body = documents
    path.write_text(json.dumps(body))
    return path


@pytest.mark.parametrize("apollo", [False, True])
def test_manifest_documents_resolve_by_hash_and_allow_only_listed_refuses_the_rest(tmp_path, apollo):
    listed = OperationList.load(_manifest(tmp_path, {HASH: QUERY}, apollo), only_listed=True)
    cache = PersistedQueries(max_entries=8, lists={"acme": listed})
    request = _hash_only()
    assert cache.resolve("acme", request) is True and request["query"] == QUERY
    assert cache.resolve("acme", {"query": QUERY}) is False  # listed, sent in full
    other = "{ collections { namespace } }"
    for request in ({"query": other}, _registering(other, sha256_hex(other)), _hash_only(sha256_hex(other))):
        with pytest.raises(OperationNotAllowed, match=f"{sha256_hex(other)} is not in tenant 'acme''s operation"):
            cache.resolve("acme", request)
    assert len(cache) == 0  # nothing was registered
    with pytest.raises(PersistedQueryNotFound):  # another tenant is not bound by acme's list
        cache.resolve("globex", _hash_only(sha256_hex(other)))


def test_a_manifest_entry_whose_hash_is_wrong_is_a_config_error(tmp_path):
    wrong = sha256_hex("{ other }")
    with pytest.raises(ConfigError, match=f"entry '{wrong}' is not the sha256 of its document \\(that is {HASH}\\)"):
        OperationList.load(_manifest(tmp_path, {wrong: QUERY}), only_listed=False)
    with pytest.raises(ConfigError, match="cannot be read"):
        OperationList.load(tmp_path / "missing.json", only_listed=False)


def _register_all(cache: PersistedQueries, tenant: str, queries: list[str]) -> None:
    for query in queries:
        cache.resolve(tenant, _registering(query, sha256_hex(query)))


def _registered(cache: PersistedQueries, tenant: str, query: str) -> bool:
    try:
        return cache.resolve(tenant, _hash_only(sha256_hex(query)))
    except PersistedQueryNotFound:
        return False


def test_a_tenant_past_its_share_evicts_only_its_own_least_recently_used():
    cache = PersistedQueries(max_entries=100, per_tenant=4)
    globex = ["{ g0 }", "{ g1 }"]
    flood = [f"{{ a{i} }}" for i in range(50)]
    _register_all(cache, "globex", globex)
    _register_all(cache, "acme", flood)
    assert all(_registered(cache, "globex", query) for query in globex)
    assert [q for q in flood if _registered(cache, "acme", q)] == flood[-4:]
    assert len(cache) == 6


def test_a_full_process_evicts_from_the_tenant_holding_the_most():
    # The shares add up to more than the process keeps: the flooding tenant gives way, not the other.
    cache = PersistedQueries(max_entries=6, per_tenant=6)
    globex = ["{ g0 }", "{ g1 }"]
    flood = [f"{{ a{i} }}" for i in range(20)]
    _register_all(cache, "globex", globex)
    _register_all(cache, "acme", flood)
    assert all(_registered(cache, "globex", query) for query in globex)
    assert [q for q in flood if _registered(cache, "acme", q)] == flood[-4:]


def test_large_documents_of_one_tenant_do_not_push_out_another_tenants():
    cache = PersistedQueries(max_entries=100, per_tenant=100, max_chars=1000, tenant_chars=400)
    _register_all(cache, "globex", ["{ g0 }"])
    big = [f"{{ a{i} {'x' * 150} }}" for i in range(10)]
    _register_all(cache, "acme", big)
    assert _registered(cache, "globex", "{ g0 }")
    assert [q for q in big if _registered(cache, "acme", q)] == big[-2:]  # 2 x 158 characters fit in 400
