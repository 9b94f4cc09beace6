"""Callback routers used by the routing tests (loaded by entry point, like a tenant's own)."""


def by_language(query: str, metadata: dict) -> str | None:
    if metadata.get("lang") == "fr" or "bonjour" in query.lower():
        return "tickets"
    return None


def broken(query: str, metadata: dict) -> str:
    return "nowhere"


def wrong_arity() -> str:
    return "docs"
