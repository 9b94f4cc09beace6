"""SearchInput.facets over HTTP, against the seeded demo tenants: counts over the search's matches, not the page."""

import json
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TICKETS = [json.loads(line) for line in (ROOT / "tenants/corpora/acme/tickets.jsonl").read_text().splitlines()]

FACETS = """
query($input: SearchInput!, $first: Int) {
  search(input: $input, first: $first) {
    hits { chunk { sourceId metadata } }
    totalCount
    facets { depth counted complete fields { field other missing buckets { label count value start end } } }
    trace { stages { name outputCount detail } }
  }
}
"""


def _search(gateway, first=None, **input):
    return gateway.data(FACETS, {"input": {"query": "refund invoice storage", **input}, "first": first})["search"]


def _chunks_per_ticket(gateway) -> dict[str, int]:
    found = _search(gateway, collection="tickets", mode="DENSE", limit=100)["hits"]
    return Counter(h["chunk"]["sourceId"] for h in found)


def test_facets_count_every_match_of_a_dense_search_not_only_the_page(gateway):
    result = _search(gateway, first=2, collection="tickets", mode="DENSE", limit=5,
                     facets=[{"field": "metadata.status"}, {"field": "source_id", "size": 3}])
    assert len(result["hits"]) == 2 and result["totalCount"] == 5
    facets = result["facets"]
    per_ticket = _chunks_per_ticket(gateway)
    # A dense search matches every chunk: the 15 tickets' chunks are fewer than the default depth of 200.
    assert (facets["depth"], facets["counted"], facets["complete"]) == (200, sum(per_ticket.values()), True)
    status, sources = facets["fields"]
    expected = Counter()
    for ticket in TICKETS:
        expected[ticket["metadata"]["status"]] += per_ticket[ticket["_id"]]
    assert {b["value"]: b["count"] for b in status["buckets"]} == dict(expected)
    assert [b["label"] for b in status["buckets"]] == ["closed", "open"]  # the larger count first
    assert (status["field"], status["other"], status["missing"]) == ("metadata.status", 0, 0)
    assert len(sources["buckets"]) == 3 and sources["other"] == facets["counted"] - sum(
        b["count"] for b in sources["buckets"])
    stage = next(s for s in result["trace"]["stages"] if s["name"] == "facets")
    assert stage["detail"] == {"depth": 200, "counted": facets["counted"], "complete": True,
                               "fields": ["metadata.status", "source_id"]}


def test_facets_follow_the_filter_and_the_depth_bounds_them(gateway):
    closed = {"field": "metadata.status", "op": "EQ", "value": "closed"}
    facets = _search(gateway, collection="tickets", mode="DENSE", filter=closed,
                     facets=[{"field": "metadata.status"}, {"field": "metadata.year", "interval": 2}])["facets"]
    assert [(b["value"], b["label"]) for b in facets["fields"][0]["buckets"]] == [("closed", "closed")]
    years = facets["fields"][1]["buckets"]
    assert [b["label"] for b in years] == sorted(b["label"] for b in years)  # ranges in order
    assert all(b["value"] is None and b["end"] - b["start"] == 2 and b["start"] % 2 == 0 for b in years)
    assert sum(b["count"] for b in years) == facets["counted"]
    bounded = _search(gateway, collection="tickets", mode="DENSE", facetDepth=4,
                      facets=[{"field": "metadata.priority"}])["facets"]
    assert (bounded["depth"], bounded["counted"], bounded["complete"]) == (4, 4, False)
    assert sum(b["count"] for b in bounded["fields"][0]["buckets"]) == 4


def test_federated_facets_count_collections_and_date_buckets(gateway):
    facets = _search(gateway, federated=True, facets=[{"field": "collection"},
                                                      {"field": "created_at", "dateInterval": "DAY"}])["facets"]
    by_collection = {b["label"]: b["count"] for b in facets["fields"][0]["buckets"]}
    assert set(by_collection) == {"support/docs", "support/tickets"}
    assert sum(by_collection.values()) == facets["counted"]
    days = facets["fields"][1]["buckets"]
    assert days and all(len(b["label"]) == 10 and b["end"] - b["start"] == 86_400_000 for b in days)
    assert sum(b["count"] for b in days) == facets["counted"]


def test_bad_facets_are_typed_errors_naming_the_value_and_the_allowed_set(gateway):
    def error(**input):
        return gateway.error(FACETS, {"input": {"query": "refund", "collection": "tickets", **input}})

    unknown = error(facets=[{"field": "content"}])
    assert unknown["extensions"]["code"] == "INVALID_INPUT"
    assert "facet field 'content' is unknown; allowed: collection, created_at, modality, page" in unknown["message"]
    undeclared = error(facets=[{"field": "metadata.owner"}])
    assert undeclared["extensions"]["code"] == "INVALID_INPUT"
    assert ("facet field 'metadata.owner' is not filterable in every searched collection; metadata keys declared "
            "by all of them: metadata.priority, metadata.product, metadata.status, metadata.year") in undeclared["message"]
    too_many = error(facets=[{"field": "source_id", "size": 101}])
    assert "facet 'source_id' asks for 101 buckets; allowed: 1 to 100" in too_many["message"]
    deep = error(facets=[{"field": "source_id"}], facetDepth=5000)
    assert "facetDepth 5000 is out of range; allowed: 1 to 1000" in deep["message"]
    # docs declares no metadata keys: a federated facet on a tickets key is refused, not half-counted.
    federated = gateway.error(FACETS, {"input": {"query": "refund", "federated": True,
                                                 "facets": [{"field": "metadata.status"}]}})
    assert "metadata keys declared by all of them: none" in federated["message"]


def test_context_returns_the_facets_it_was_asked_for(gateway):
    data = gateway.data('{ context(input: {query: "refund", collection: "tickets", limit: 2, '
                        'facets: [{field: "metadata.product"}]}) { hits { score } facets { counted fields { '
                        'buckets { label count } } } } }')["context"]
    assert len(data["hits"]) == 2
    assert data["facets"]["counted"] > 2  # the matches, not the two hits rendered
    assert sum(b["count"] for b in data["facets"]["fields"][0]["buckets"]) == data["facets"]["counted"]


def test_a_bm25_search_counts_exactly_the_chunks_that_hold_a_query_term(gateway):
    # Sparse matches are the chunks sharing a term with the query: with room for all of them, the
    # facets count the same set the search ranks, however small the page.
    every = _search(gateway, collection="tickets", mode="SPARSE", query="refund", limit=100)
    page = _search(gateway, first=1, collection="tickets", mode="SPARSE", query="refund", limit=3,
                   facets=[{"field": "source_id", "size": 100}])
    facets = page["facets"]
    assert len(page["hits"]) == 1 and facets["complete"] is True
    assert facets["counted"] == len(every["hits"]) < 100
    assert {b["value"]: b["count"] for b in facets["fields"][0]["buckets"]} == dict(
        Counter(h["chunk"]["sourceId"] for h in every["hits"]))
