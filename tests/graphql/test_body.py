"""The request-shape checks that run before Strawberry parses anything."""

import pytest

from gateway.errors import InvalidInput, LimitExceeded, UnsupportedMediaType
from gateway.graphql.body import (
    MAX_DOCUMENT_NESTING,
    check_content_type,
    check_document_nesting,
    check_json_body,
    check_query_params,
)


def test_a_plain_request_passes_and_is_returned():
    body = b'{"query": "{ collections { name } }", "variables": {"a": [1, 2.5, "x"]}, "operationName": null}'
    assert check_json_body(body)["variables"] == {"a": [1, 2.5, "x"]}


@pytest.mark.parametrize("body, error, message", [
    (b'"x"', InvalidInput, "request body is a JSON string; send a JSON object"),
    (b"null", InvalidInput, "request body is a JSON null"),
    (b"true", InvalidInput, "request body is a JSON boolean"),
    (b"[]", InvalidInput, "batched requests"),
    (b"\xff\xfe", InvalidInput, "request body is not valid JSON"),
    (b'{"query": "{ a }", "variables": {"x": Infinity}}', InvalidInput, "Infinity is not a JSON number"),
    (b'{"query": "{ a }", "variables": {"x": -Infinity}}', InvalidInput, "-Infinity is not a JSON number"),
    (b'{"query": "{ a }", "operationName": 5}', InvalidInput, "'operationName' must be a string or null, got number"),
    (b'{"query": "{ a }", "extensions": "x"}', InvalidInput, "'extensions' must be an object or null, got string"),
    (b'{"variables": {}}', InvalidInput, "'query' must be a string holding a GraphQL document, got null"),
    (b'[' * 100_000 + b']' * 100_000, LimitExceeded, "nests JSON more than 32 levels"),
])
def test_bad_bodies_name_the_problem(body, error, message):
    with pytest.raises(error, match=message):
        check_json_body(body)


def test_document_nesting_limit_is_exact_and_ignores_strings_and_comments():
    at_limit = "{" * MAX_DOCUMENT_NESTING + "}" * MAX_DOCUMENT_NESTING
    check_document_nesting(at_limit)
    check_document_nesting('{ a(s: "' + "{" * 500 + '") }')
    check_document_nesting('{ a(s: """' + "[" * 500 + '""") }\n# ' + "(" * 500)
    with pytest.raises(LimitExceeded, match="nests brackets more than 64 levels deep; at most 64"):
        check_document_nesting("{" + at_limit + "}")


def test_get_query_strings_follow_the_same_rules():
    check_query_params({"query": "{ collections { name } }", "variables": '{"a": 1}'})
    with pytest.raises(InvalidInput, match="'variables' is not valid JSON"):
        check_query_params({"query": "{ a }", "variables": "{nope"})
    with pytest.raises(InvalidInput, match="NaN is not a JSON number"):
        check_query_params({"query": "{ a }", "variables": '{"a": NaN}'})
    with pytest.raises(InvalidInput, match="'query' must be a string"):
        check_query_params({})


@pytest.mark.parametrize("header", ["application/json", "APPLICATION/Json", "application/json;charset=utf-8",
                                    'application/json; charset="UTF-8"', " application/json ; charset=utf8 ",
                                    "application/json;", 'application/json; a="x;y\\""; charset=utf-8'])
def test_application_json_is_accepted_in_its_legal_spellings(header):
    check_content_type(header)


@pytest.mark.parametrize("header", ['a/b"; "application/json', 'text;"application/json', '"text;"application/json',
                                    "application/json, text/plain", "application/jsonp", "application/graphql",
                                    "application/json; charset=iso-8859-1", "application/json; charset",
                                    "application/json x", "text/plain; x=application/json", "", None])
def test_anything_else_is_unsupported_media_type_naming_what_is_allowed(header):
    with pytest.raises(UnsupportedMediaType, match=r"is not supported; allowed: application/json"):
        check_content_type(header)


def test_the_content_type_parse_stays_linear_on_hostile_headers():
    import time

    started = time.perf_counter()
    for header in ["application/json" + " ; " * 20_000 + '"', "application/json" + "; a=b " * 20_000 + "\x00",
                   'application/json; a="' + "\\\\" * 20_000]:
        with pytest.raises(UnsupportedMediaType):
            check_content_type(header)
    # Each is refused in milliseconds; the regex before its rewrite took minutes on the first one.
    assert time.perf_counter() - started < 2
