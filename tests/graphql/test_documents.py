import pytest
from graphql import GraphQLError

from gateway.graphql.documents import MAX_DOCUMENT_CHARS, document_cache
from gateway.graphql.schema import build_schema
from gateway.settings import Settings

SEARCH = '{ search(input: {query: "x", collection: "docs"}) { hits { chunk { id } } } }'
TOO_DEEP = '{ search(input: {query: "x"}) { hits { provenance { scores { signal } } } } }'


def test_each_distinct_text_is_parsed_once_and_validated_once():
    schema = build_schema(Settings(max_query_depth=3))
    cache = schema.documents
    first = cache.parse(TOO_DEEP, tenant="t")
    assert cache.parse(TOO_DEEP, tenant="t") is first and (cache.hits, cache.misses) == (1, 1)
    errors = cache.validate(schema._schema, TOO_DEEP, first, tenant="t")
    assert cache.validate(schema._schema, TOO_DEEP, first, tenant="t") is errors
    assert "exceeds maximum operation depth of 3" in errors[0].message


def test_limits_hold_on_every_request_not_only_the_first():
    schema = build_schema(Settings(max_query_depth=3, max_aliases=2))
    aliases = "{ a: collections { name } b: collections { name } c: collections { name } }"
    for _ in range(3):
        deep = schema.execute_sync(TOO_DEEP)
        assert deep.errors[0].extensions["code"] == "LIMIT_EXCEEDED"
        many = schema.execute_sync(aliases)
        assert many.errors[0].extensions["code"] == "LIMIT_EXCEEDED"
        assert "3 aliases" in many.errors[0].message or "aliases" in many.errors[0].message
    assert schema.documents.hits >= 4


def test_a_document_that_does_not_parse_still_gets_the_parse_error_each_time():
    schema = build_schema(Settings(max_tokens=20))
    long_document = "{ " + " ".join(f"a{i}: collections {{ name }}" for i in range(10)) + " }"
    for text, fragment in (("{ search(", "Syntax Error"), (long_document, "more than 20 tokens")):
        for _ in range(2):
            result = schema.execute_sync(text)
            assert result.errors and fragment.lower() in result.errors[0].message.lower()
    assert len(schema.documents) == 0
    with pytest.raises(GraphQLError):
        schema.documents.parse("{ search(", tenant="t")


def test_the_cache_is_bounded_by_count_and_characters():
    cache = document_cache(max_tokens=100_000, max_depth=10, max_aliases=15)
    cache.max_documents = 3
    texts = [f"{{ a{i}: collections {{ name }} }}" for i in range(5)]
    for text in texts:
        cache.parse(text, tenant="t")
    assert len(cache) == 3
    assert cache.parse(texts[-1], tenant="t") is cache.parse(texts[-1], tenant="t") and cache.hits == 2
    cache.max_chars = len(texts[0]) * 2
    cache.parse("{ z: collections { name } }", tenant="t")
    assert len(cache) <= 2
    huge = "{ " + "collections { name } " * (MAX_DOCUMENT_CHARS // 20) + "}"
    assert cache.parse(huge, tenant="t") is not cache.parse(huge, tenant="t")  # never cached: a client cannot pin big bodies


def test_each_tenant_has_its_own_entry_for_the_same_text():
    cache = document_cache(max_tokens=2000, max_depth=10, max_aliases=15)
    mine = cache.parse(TOO_DEEP, tenant="a")
    assert cache.parse(TOO_DEEP, tenant="b") is not mine and cache.parse(TOO_DEEP, tenant="a") is mine
    assert (cache.hits, cache.misses, len(cache)) == (1, 2, 2)


def test_what_is_derived_from_a_document_is_built_once_per_tenant_and_goes_with_it():
    cache = document_cache(max_tokens=2000, max_depth=10, max_aliases=15)
    cache.max_documents = 1
    built: list[str] = []

    def derived(tenant: str) -> str:
        document = cache.parse(SEARCH, tenant=tenant)
        return cache.derived(SEARCH, document, "plan", lambda: built.append(tenant) or f"plan of {tenant}",
                             tenant=tenant)

    assert derived("a") == derived("a") == "plan of a" and built == ["a"]
    assert derived("b") == "plan of b" and built == ["a", "b"]  # never another tenant's entry
    assert derived("a") == "plan of a" and built == ["a", "b", "a"]  # evicted with a's document


def test_one_document_text_serves_every_tenant_with_its_own_data(gateway):
    query = '{ search(input: {query: "refund policy", collection: "docs"}) { hits { provenance { tenant } } } }'
    for key, tenant in (("acme-reader", "acme"), ("globex-reader", "globex"), ("acme-reader", "acme")):
        hits = gateway.post(query, key=key).json()["data"]["search"]["hits"]
        assert hits and {h["provenance"]["tenant"] for h in hits} == {tenant}
