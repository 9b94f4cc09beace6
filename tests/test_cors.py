"""CORS middleware (gateway/cors.py) around a plain ASGI app; the browser test is in
tests/graphql/test_http_browser.py."""

import httpx
import pytest
from starlette.responses import PlainTextResponse

from gateway.cors import Cors

ORIGIN = "http://localhost:3000"


async def _app(scope, receive, send):
    await PlainTextResponse("ok", headers={"Vary": "Authorization"})(scope, receive, send)


def _client(origins=(ORIGIN,), methods=("GET", "POST")) -> httpx.AsyncClient:
    app = Cors(_app, origins=origins, methods=methods, max_age_s=600)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


def _preflight(origin=ORIGIN, method="POST", headers="authorization, content-type") -> dict:
    return {"Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}


async def test_an_allowed_preflight_is_answered_with_methods_headers_and_max_age():
    async with _client() as client:
        response = await client.options("/graphql", headers=_preflight())
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert response.headers["access-control-allow-methods"] == "GET, POST"
    assert "authorization" in response.headers["access-control-allow-headers"]
    assert "content-type" in response.headers["access-control-allow-headers"]
    assert response.headers["access-control-max-age"] == "600"
    assert "Origin" in response.headers["vary"]


@pytest.mark.parametrize("preflight, fragment", [
    (_preflight(origin="http://evil.example"), "origin 'http://evil.example' is not allowed to call this gateway; "
                                                "allowed: http://localhost:3000"),
    (_preflight(method="PUT"), "method 'PUT' is not allowed from a browser; allowed: GET, POST"),
    (_preflight(headers="x-secret"), "request header(s) x-secret are not allowed from a browser"),
])
async def test_a_refused_preflight_is_a_coded_403_naming_the_value(preflight, fragment):
    async with _client() as client:
        response = await client.options("/graphql", headers=preflight)
    assert response.status_code == 403
    assert "access-control-allow-origin" not in response.headers
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "FORBIDDEN" and fragment in error["message"]


async def test_responses_name_the_allowed_origin_and_always_vary_on_origin():
    async with _client() as client:
        allowed = await client.post("/graphql", headers={"Origin": ORIGIN})
        other = await client.post("/graphql", headers={"Origin": "http://evil.example"})
        no_origin = await client.post("/graphql")
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    assert allowed.headers["access-control-expose-headers"] == "Retry-After"
    assert allowed.headers["vary"] == "Authorization, Origin"
    assert "access-control-allow-origin" not in other.headers and other.headers["vary"] == "Authorization, Origin"
    assert "access-control-allow-origin" not in no_origin.headers


async def test_a_wildcard_allows_any_origin():
    async with _client(origins=("*",)) as client:
        response = await client.options("/graphql", headers=_preflight(origin="http://anywhere:1"))
    assert response.status_code == 204 and response.headers["access-control-allow-origin"] == "*"


def test_cors_without_origins_is_refused_at_construction():
    with pytest.raises(ValueError, match="leave the middleware out"):
        Cors(_app, origins=(), methods=("GET",), max_age_s=1)
