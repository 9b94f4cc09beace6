"""Keyword, metadata and callback routers, and a tenant's ordered router chain.

Callbacks are imported and checked when the chain is built (start-up), never at first use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.entry_points import load_entry_point
from gateway.errors import ConfigError
from gateway.tenancy.config import (
    FEDERATED,
    CallbackRouterConfig,
    KeywordRouterConfig,
    MetadataRouterConfig,
    TenantConfig,
)


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """A router's answer: the route, and what matched (a word, a metadata value, a callback)."""

    route: str
    matched: str


@dataclass(frozen=True, slots=True)
class RouteDecision:
    router: str
    route: str
    matched: str | None
    considered: tuple[str, ...] = field(default=())


class Router(Protocol):
    name: str

    def route(self, query: str, metadata: Mapping[str, Any]) -> RouteMatch | None: ...


class KeywordRouter:
    """Whole-word, whole-phrase matching; routes are tried in file order."""

    name = "keyword"

    def __init__(self, config: KeywordRouterConfig) -> None:
        flags = 0 if config.case_sensitive else re.IGNORECASE
        self._patterns = [(route, [(word, re.compile(_phrase(word), flags)) for word in words])
                          for route, words in config.routes.items()]

    def route(self, query: str, metadata: Mapping[str, Any]) -> RouteMatch | None:
        for route, patterns in self._patterns:
            for word, pattern in patterns:
                if pattern.search(query):
                    return RouteMatch(route, word)
        return None


def _phrase(words: str) -> str:
    # Whole words: a word character at the phrase's edge may not touch another one; inner spaces
    # match any run of whitespace. ("GLX-" therefore matches "GLX-2001", "ticket" not "tickets".)
    stripped = words.strip()
    body = r"\s+".join(re.escape(part) for part in stripped.split())
    before = r"(?<!\w)" if re.match(r"\w", stripped) else ""
    after = r"(?!\w)" if re.search(r"\w$", stripped) else ""
    return before + body + after


class MetadataRouter:
    """Maps the value of one key of the query's metadata to a route."""

    name = "metadata"

    def __init__(self, config: MetadataRouterConfig, tenant: TenantConfig) -> None:
        self._key = config.key
        self._map = config.map
        self._tenant = tenant

    def route(self, query: str, metadata: Mapping[str, Any]) -> RouteMatch | None:
        value = metadata.get(self._key)
        if not isinstance(value, str):
            return None
        route = self._map.get(value) if self._map is not None else value
        if route is None or (route != FEDERATED and self._tenant.route_target(route) is None):
            return None
        return RouteMatch(route, f"{self._key}={value}")


class CallbackRouter:
    """Calls `module:function(query, metadata)`; the function returns a route or None."""

    name = "callback"

    def __init__(self, config: CallbackRouterConfig, tenant: TenantConfig) -> None:
        self._function = load_entry_point(config.function, f"tenant {tenant.id!r} callback router",
                                          ("query", {}), "(query, metadata)")
        self._label = config.function
        self._tenant = tenant

    def route(self, query: str, metadata: Mapping[str, Any]) -> RouteMatch | None:
        route = self._function(query, dict(metadata))
        if route is None:
            return None
        if not isinstance(route, str) or (route != FEDERATED and self._tenant.route_target(route) is None):
            raise ConfigError(f"callback router {self._label} returned {route!r}, which is not a route of tenant "
                              f"{self._tenant.id!r}; allowed: {', '.join(self._tenant.route_names())} or None")
        return RouteMatch(route, self._label)


class RouterChain:
    """A tenant's routers in order, then its default."""

    def __init__(self, tenant: TenantConfig) -> None:
        self._tenant = tenant
        self._routers: list[Router] = []
        for rule in tenant.router.rules:
            if rule.keyword is not None:
                self._routers.append(KeywordRouter(rule.keyword))
            elif rule.metadata is not None:
                self._routers.append(MetadataRouter(rule.metadata, tenant))
            elif rule.callback is not None:
                self._routers.append(CallbackRouter(rule.callback, tenant))

    @property
    def default(self) -> str | None:
        return self._tenant.router.default

    def decide(self, query: str, metadata: Mapping[str, Any],
               allowed: Callable[[str], bool] = lambda route: True) -> RouteDecision | None:
        """The first router whose route is allowed here (e.g. inside the requested namespace)."""
        considered = []
        for router in self._routers:
            match = router.route(query, metadata)
            considered.append(f"{router.name}:{match.route if match else '-'}")
            if match is not None and allowed(match.route):
                return RouteDecision(router.name, match.route, match.matched, tuple(considered))
        if self.default is not None and allowed(self.default):
            return RouteDecision("default", self.default, None, tuple(considered))
        return None
