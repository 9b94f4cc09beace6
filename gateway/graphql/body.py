"""The shape of a GraphQL HTTP request, checked before Strawberry sees it.

Strawberry answers a body that is a JSON string or `null` with a 500, accepts `NaN` and deeply
nested variables, and parses documents recursively. Here every such request becomes a coded
4xx: one JSON object with `query` (string), optional `variables` (object), `operationName`
(string) and `extensions` (object); JSON within the nesting limit, finite numbers within 64-bit
range, valid Unicode text; a document whose brackets nest within the limit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gateway.errors import InvalidInput, LimitExceeded, UnsupportedMediaType
from gateway.values import check_json, has_surrogate

# Variables nest far less than this in any real query (a filter is at most 8 levels, each two
# JSON levels deep); the cap bounds every recursive consumer downstream.
MAX_JSON_DEPTH = 32
# Brackets ({ [ ( ) in a document: selections and input literals. graphql-core parses them
# recursively, several stack frames a level; 64 levels stays far from Python's limit.
MAX_DOCUMENT_NESTING = 64
_STRINGS = re.compile(r'"""(?:\\"""|[^"]|"(?!""))*"""|"(?:\\.|[^"\\\n])*"|#[^\n]*')
_BRACKETS = re.compile(r"[\[\]{}()]")
_OPENING = frozenset("[{(")
# The one media type a POST body is read as (the GraphQL-over-HTTP spec's request type).
JSON_MEDIA_TYPE = "application/json"
# RFC 9110 8.3.1: type "/" subtype *( OWS ";" OWS [ token "=" ( token / quoted-string ) ] ).
# Written so that each space can match in one place only: no backtracking blow-up on hostile input.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[\t\x20-\x7e\x80-\xff])*"'
_PARAMETER = re.compile(rf";[ \t]*(?:({_TOKEN})=({_TOKEN}|{_QUOTED})[ \t]*)?")
_MEDIA_TYPE = re.compile(rf"[ \t]*({_TOKEN})/({_TOKEN})[ \t]*((?:{_PARAMETER.pattern})*)")


def check_content_type(header: str | None) -> None:
    """A POST body is JSON only under `application/json` (charset, if given, utf-8), parsed strictly.

    This is the one decision: what it refuses never reaches a parser, and the endpoint hands the
    request on with the canonical header, so no later reader can decide differently.
    """
    shown = header if header is not None else "(none)"
    refusal = UnsupportedMediaType(f"Content-Type {shown[:120]!r} is not supported; allowed: "
                                   f"{JSON_MEDIA_TYPE} (optionally with charset=utf-8) for a POST body, "
                                   "or GET with a query string")
    match = _MEDIA_TYPE.fullmatch(header or "")
    if match is None or f"{match.group(1)}/{match.group(2)}".lower() != JSON_MEDIA_TYPE:
        raise refusal
    for name, value in _PARAMETER.findall(match.group(3)):
        if name.lower() == "charset" and value.strip('"').lower() not in ("utf-8", "utf8"):
            raise refusal


def check_json_body(body: bytes) -> dict[str, Any]:
    """A POSTed JSON body as a request object, or a coded error naming what is wrong."""
    data = parse_json_body(body)
    check_request(data)
    return data


def parse_json_body(body: bytes) -> dict[str, Any]:
    """A POSTed body as one JSON object; its fields are checked by check_request (after a
    persisted query, if any, has filled in `query`)."""
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except RecursionError:
        raise LimitExceeded(f"request body nests JSON more than {MAX_JSON_DEPTH} levels deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"request body is not valid JSON ({_reason(exc)}); send a JSON object with a "
                           "'query' string") from None
    if isinstance(data, list):
        raise InvalidInput("batched requests (a JSON array) are not supported; send one JSON object with a "
                           "'query' string per request")
    if not isinstance(data, dict):
        raise InvalidInput(f"request body is a JSON {_json_type(data)}; send a JSON object with a 'query' string")
    return data


def check_request(data: Mapping[str, Any]) -> None:
    """Field types, variables and document nesting of one request (from a body or a GET query string)."""
    query = data.get("query")
    if not isinstance(query, str):
        raise InvalidInput(f"'query' must be a string holding a GraphQL document, got {_json_type(query)}")
    for name, kind in (("variables", dict), ("extensions", dict), ("operationName", str)):
        value = data.get(name)
        if value is not None and not isinstance(value, kind):
            expected = "an object" if kind is dict else "a string"
            raise InvalidInput(f"'{name}' must be {expected} or null, got {_json_type(value)}")
    if has_surrogate(query):
        raise InvalidInput("'query' contains a lone UTF-16 surrogate; allowed: valid Unicode text")
    check_document_nesting(query)
    for name in ("variables", "extensions", "operationName"):
        if data.get(name) is not None:
            check_json(data[name], where=name, max_depth=MAX_JSON_DEPTH)


def check_query_params(params: Mapping[str, str]) -> None:
    """A GET request's query string: the same rules, with variables given as JSON text."""
    check_request(parse_query_params(params))


def parse_query_params(params: Mapping[str, str]) -> dict[str, Any]:
    """A GET request's query string as a request object, `variables` and `extensions` decoded."""
    data: dict[str, Any] = {"query": params.get("query"), "operationName": params.get("operationName")}
    for name in ("variables", "extensions"):
        if name in params:
            try:
                data[name] = json.loads(params[name], parse_constant=_no_constant)
            except RecursionError:
                raise LimitExceeded(f"'{name}' nests JSON more than {MAX_JSON_DEPTH} levels deep") from None
            except ValueError as exc:
                raise InvalidInput(f"'{name}' is not valid JSON ({_reason(exc)})") from None
    return data


def check_document_nesting(document: str) -> None:
    """Refuse a document whose brackets nest deeper than the limit, before anything parses it."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(_STRINGS.sub('""', document)):
        depth += 1 if match.group() in _OPENING else -1
        deepest = max(deepest, depth)
        if deepest > MAX_DOCUMENT_NESTING:
            raise LimitExceeded(f"the GraphQL document nests brackets more than {MAX_DOCUMENT_NESTING} levels "
                                f"deep; at most {MAX_DOCUMENT_NESTING} are allowed")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _reason(exc: Exception) -> str:
    return ascii(str(exc))[1:-1][:120]


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {str: "string", bool: "boolean", int: "number", float: "number", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)
