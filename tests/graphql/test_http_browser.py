"""In a real headless Chromium: the GraphiQL page works offline with a key, and CORS lets a page
on an allowed origin call the gateway and keeps any other origin out.

Uses the system's Chromium (Debian's `chromium` package; .ci/run installs it) through the
`playwright` package; no browser is downloaded. Skipped, with the reason, when either is missing.
"""

import json
import shutil
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gateway.settings import Settings
from tests.conftest import KEYS, ROOT
from tests.serving import serve

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "artifacts"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium (Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="the `playwright` package is not installed")
    with sync_api.sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def test_graphiql_works_offline_and_answers_with_a_demo_key(gateway, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    outside: list[str] = []

    def only_the_gateway(route):
        if route.request.url.startswith(gateway.url):
            route.continue_()
        else:  # a CDN, a font host: an offline network would not answer either
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_gateway)
    page.goto(f"{gateway.url}/graphql", wait_until="networkidle")
    page.wait_for_selector(".graphiql-execute-button")
    # Before a key: the page says what to do, not "Error fetching schema".
    assert "Every request needs an API key" in page.inner_text("#key-help")
    page.wait_for_function("document.querySelector('.graphiql-response')?.innerText.includes('No API key yet')")
    headers = page.locator(".graphiql-editor-tool .graphiql-editor").last
    assert "Bearer <your API key>" in headers.inner_text()
    headers.click()
    page.keyboard.press("Control+A")
    # insert_text types no key events, so the editor's bracket auto-closing stays out of the way.
    page.keyboard.insert_text(json.dumps({"Authorization": f"Bearer {KEYS['acme-reader']}"}))
    page.click(".graphiql-execute-button")
    page.wait_for_function("document.querySelector('.graphiql-response')?.innerText.includes('sourceId')")
    # The response editor renders only its visible lines, so this reads the top of the answer.
    answer = page.inner_text(".graphiql-response")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "graphiql.png"
    page.screenshot(path=str(shot))
    print(f"GraphiQL screenshot: {shot}")
    page.close()
    assert '"hits"' in answer and '"errors"' not in answer
    assert "refunds" in answer.lower()  # the demo question finds acme's refund evidence
    assert outside == []


ALLOWED_PAGE, OTHER_PAGE = "allowed", "other"


@pytest.fixture(scope="module")
def page_servers(tmp_path_factory) -> Iterator[dict[str, str]]:
    """Two static pages on other loopback origins (other ports): one allowed, one not."""
    root = tmp_path_factory.mktemp("pages")
    (root / "index.html").write_text("<!doctype html><title>frontend</title>")
    servers = {}
    for name in (ALLOWED_PAGE, OTHER_PAGE):
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    yield {name: f"http://127.0.0.1:{server.server_address[1]}" for name, server in servers.items()}
    for server in servers.values():
        server.shutdown()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def cors_gateway(tmp_path_factory, page_servers):
    directory = tmp_path_factory.mktemp("cors")
    settings = Settings(milvus_uri=str(directory / "gateway.db"), tenants_dir=ROOT / "tenants",
                        ingest_demo_on_start=False, cors_origins=(page_servers[ALLOWED_PAGE],))
    with serve(settings) as served:
        yield served


FETCH = """async ([url, key]) => {
  try {
    const response = await fetch(url, {method: "POST", headers: {
      "Authorization": "Bearer " + key, "Content-Type": "application/json",
      "Accept": "application/graphql-response+json"}, body: JSON.stringify({query: "{ collections { name } }"})});
    return {status: response.status, body: await response.json()};
  } catch (error) {
    return {failed: String(error)};
  }
}"""


def test_a_page_on_an_allowed_origin_can_call_the_gateway_and_others_cannot(cors_gateway, page_servers, browser):
    results = {}
    for name, origin in page_servers.items():
        page = browser.new_page()
        page.goto(f"{origin}/index.html")
        results[name] = page.evaluate(FETCH, [f"{cors_gateway.url}/graphql", KEYS["acme-reader"]])
        page.close()
    allowed = results[ALLOWED_PAGE]
    assert allowed.get("status") == 200, allowed
    assert {c["name"] for c in allowed["body"]["data"]["collections"]} == {"docs", "tickets"}
    # The preflight was refused, so the browser never sent the request.
    assert "Failed to fetch" in results[OTHER_PAGE].get("failed", ""), results[OTHER_PAGE]


def test_cors_settings_are_checked(tmp_path):
    with pytest.raises(ValueError, match="CORS origin 'localhost:3000' must be"):
        Settings(cors_origins="localhost:3000")
    with pytest.raises(ValueError, match="CORS method 'PATCH' is not served; allowed: GET, POST, DELETE"):
        Settings(cors_methods="GET,PATCH")
    assert Settings(cors_origins='["http://a.test", "https://B.test:8443"]').cors_origins == (
        "http://a.test", "https://b.test:8443")
