"""The GraphiQL page: served with its scripts from the package, so it works offline.

The page is public (it executes nothing); every request it sends carries the key the user puts
in its Headers pane, which starts as a template with a placeholder and an explanation above it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).with_name("static")
PLACEHOLDER = "<your API key>"
DEFAULT_QUERY = """# Search the caller's collections; Ctrl+Enter runs it.
query Search($q: String!) {
  search(input: {query: $q, limit: 3}) {
    hits { rank score content chunk { id collection sourceId chunkId title } }
    trace { stages { name status durationMs outputCount } }
  }
}
"""
DEFAULT_VARIABLES = '{"q": "How do refunds work?"}'


@cache
def _template() -> str:
    return Path(__file__).with_name("graphiql.html").read_text(encoding="utf-8")


def graphiql_page(request: Request) -> HTMLResponse:
    """The page for the endpoint at request's path; asset URLs are relative, so a path prefix
    added by a proxy keeps working."""
    static = request.url.path.rstrip("/").rsplit("/", 1)[-1] + "/static"
    html = (_template().replace("__STATIC__", static)
            .replace("__DEFAULT_QUERY__", json.dumps(DEFAULT_QUERY))
            .replace("__DEFAULT_VARIABLES__", json.dumps(DEFAULT_VARIABLES))
            .replace("__PLACEHOLDER_JS__", json.dumps(PLACEHOLDER))
            .replace("__PLACEHOLDER_HTML__", PLACEHOLDER.replace("<", "&lt;").replace(">", "&gt;")))
    return HTMLResponse(html, headers={"Cache-Control": "no-cache"})


def static_files() -> StaticFiles:
    """The page's scripts and styles (gateway/graphql/static/README.md says where they come from)."""
    return StaticFiles(directory=STATIC_DIR)
