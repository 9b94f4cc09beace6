import pytest
from pydantic import ValidationError

from gateway.errors import ConfigError
from gateway.routing.routers import RouterChain
from gateway.tenancy.config import TenantConfig


def tenant(router: dict, **extra) -> TenantConfig:
    return TenantConfig.model_validate({
        "id": "acme",
        "namespaces": {
            "support": {"collections": {"docs": {"trust_tier": "first-party"},
                                        "tickets": {"trust_tier": "user-generated"}}},
            "sales": {"collections": {"leads": {"trust_tier": "partner"}}},
        },
        "router": router, **extra})


def decide(chain: RouterChain, query: str, metadata: dict | None = None):
    return chain.decide(query, metadata or {})


def test_keyword_router_first_route_in_file_order_wins():
    chain = RouterChain(tenant({"rules": [{"keyword": {"routes": {
        "tickets": ["refund", "outage"], "docs": ["refund policy", "how to"]}}}]}))
    decision = decide(chain, "What is the refund policy?")
    assert (decision.router, decision.route, decision.matched) == ("keyword", "tickets", "refund")
    assert decide(chain, "how to rotate keys").route == "docs"


def test_keyword_router_matches_whole_words_and_phrases_only():
    chain = RouterChain(tenant({"rules": [{"keyword": {"routes": {"tickets": ["ticket", "error code", "GLX-"]}}}]}))
    assert decide(chain, "open a ticket please").route == "tickets"
    assert decide(chain, "the tickets page") is None          # 'ticket' is not a whole word in 'tickets'
    assert decide(chain, "error   code 42").route == "tickets"  # any whitespace inside a phrase
    assert decide(chain, "see GLX-2001").route == "tickets"     # a phrase ending in '-' may touch a digit
    assert decide(chain, "errorcode") is None


def test_keyword_case_rules():
    insensitive = RouterChain(tenant({"rules": [{"keyword": {"routes": {"tickets": ["Outage"]}}}]}))
    assert decide(insensitive, "OUTAGE today").route == "tickets"
    sensitive = RouterChain(tenant({"rules": [{"keyword": {"routes": {"tickets": ["Outage"]}, "case_sensitive": True}}]}))
    assert decide(sensitive, "outage today") is None
    assert decide(sensitive, "Outage today").route == "tickets"


def test_metadata_router_maps_values_and_ignores_unknown_ones():
    chain = RouterChain(tenant({"rules": [{"metadata": {"key": "source", "map": {"kb": "docs"}}},
                                          {"metadata": {"key": "collection"}}], "default": "federated"}))
    assert decide(chain, "x", {"source": "kb"}).route == "docs"
    assert decide(chain, "x", {"collection": "sales/leads"}).route == "sales/leads"
    fallback = decide(chain, "x", {"collection": "nope", "source": 3})
    assert (fallback.router, fallback.route) == ("default", "federated")
    assert fallback.considered == ("metadata:-", "metadata:-")


def test_callback_router_loaded_at_start_and_checked():
    chain = RouterChain(tenant({"rules": [{"callback": {"function": "tests.routing.sample_callbacks:by_language"}}],
                                "default": "docs"}))
    assert decide(chain, "bonjour").route == "tickets"
    assert decide(chain, "hello", {"lang": "fr"}).matched == "tests.routing.sample_callbacks:by_language"
    assert decide(chain, "hello").router == "default"
    with pytest.raises(ConfigError, match="cannot import module 'tests.routing.missing'"):
        RouterChain(tenant({"rules": [{"callback": {"function": "tests.routing.missing:f"}}]}))
    with pytest.raises(ConfigError, match="must accept \\(query, metadata\\)"):
        RouterChain(tenant({"rules": [{"callback": {"function": "tests.routing.sample_callbacks:wrong_arity"}}]}))
    broken = RouterChain(tenant({"rules": [{"callback": {"function": "tests.routing.sample_callbacks:broken"}}]}))
    with pytest.raises(ConfigError, match="returned 'nowhere', which is not a route of tenant 'acme'"):
        decide(broken, "x")


def test_unknown_route_is_a_configuration_error_at_start_up():
    with pytest.raises(ValidationError, match="names route 'tikets', which is not a collection of tenant 'acme'"):
        tenant({"rules": [{"keyword": {"routes": {"tikets": ["refund"]}}}]})
    with pytest.raises(ValidationError, match="router.default names route 'everything'"):
        tenant({"default": "everything"})
    with pytest.raises(ValidationError, match="exactly one of keyword, metadata, callback"):
        tenant({"rules": [{}]})


def test_routes_outside_the_allowed_set_are_skipped():
    chain = RouterChain(tenant({"rules": [{"keyword": {"routes": {"leads": ["price"], "tickets": ["price list"]}}}],
                                "default": "docs"}))
    decision = chain.decide("price list", {}, allowed=lambda route: route != "leads")
    assert decision.route == "docs" and decision.considered == ("keyword:leads",)
