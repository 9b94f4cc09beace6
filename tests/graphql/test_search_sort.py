"""SearchInput.sort over HTTP: stored properties order the ranked hits, relevance breaks ties, pages stay stable."""

SORTED = """
query($input: SearchInput!, $first: Int, $after: String) {
  search(input: $input, first: $first, after: $after) {
    hits { rank score chunk { sourceId chunkId metadata title } provenance { ingestedAt } }
    pageInfo { hasNextPage endCursor }
    trace { stages { name detail } }
  }
}
"""
# Only identities selected: the search must still fetch the properties it sorts by.
IDS_ONLY = """
query($input: SearchInput!) { search(input: $input) { hits { chunk { sourceId chunkId } } } }
"""


def _hits(gateway, first=None, after=None, **input):
    data = gateway.data(SORTED, {"input": {"query": "refund invoice charge", "collection": "tickets", "limit": 12,
                                           **input}, "first": first, "after": after})
    return data["search"]


def test_sort_by_metadata_orders_the_ranked_hits_with_relevance_breaking_ties(gateway):
    ranked = _hits(gateway)["hits"]
    result = _hits(gateway, sort=[{"field": "metadata.year", "order": "DESC"}])
    hits = result["hits"]
    # The same hits (the limit's best), reordered.
    assert sorted((h["chunk"]["sourceId"], h["chunk"]["chunkId"]) for h in hits) == sorted(
        (h["chunk"]["sourceId"], h["chunk"]["chunkId"]) for h in ranked)
    years = [h["chunk"]["metadata"]["year"] for h in hits]
    assert years == sorted(years, reverse=True) and len(set(years)) > 1
    for year in set(years):  # within a year, the ranked order
        same = [h["score"] for h in hits if h["chunk"]["metadata"]["year"] == year]
        assert same == sorted(same, reverse=True)
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    shape = next(s for s in result["trace"]["stages"] if s["name"] == "shape")
    assert shape["detail"]["sort"] == ["metadata.year desc"]


def test_two_keys_and_strings(gateway):
    hits = _hits(gateway, sort=[{"field": "metadata.status"}, {"field": "title", "order": "DESC"}])["hits"]
    keys = [(h["chunk"]["metadata"]["status"], h["chunk"]["title"]) for h in hits]
    statuses = [k[0] for k in keys]
    assert statuses == sorted(statuses)
    for status in set(statuses):
        titles = [t for s, t in keys if s == status]
        assert titles == sorted(titles, reverse=True)


def test_pages_of_a_sorted_search_neither_repeat_nor_skip(gateway):
    sort = [{"field": "metadata.priority"}]
    whole = [(h["chunk"]["sourceId"], h["chunk"]["chunkId"]) for h in _hits(gateway, sort=sort)["hits"]]
    paged, after = [], None
    while True:
        page = _hits(gateway, first=5, after=after, sort=sort)
        paged += [(h["chunk"]["sourceId"], h["chunk"]["chunkId"]) for h in page["hits"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert paged == whole and len(whole) == 12
    # A cursor of the unsorted search is not one of the sorted search.
    cursor = _hits(gateway, first=5)["pageInfo"]["endCursor"]
    body = gateway.post(SORTED, {"input": {"query": "refund invoice charge", "collection": "tickets", "limit": 12,
                                           "sort": sort}, "first": 5, "after": cursor}).json()
    assert body["errors"][0]["extensions"]["code"] == "INVALID_INPUT"


def test_a_sort_reads_its_property_when_the_selection_does_not(gateway):
    sort = [{"field": "metadata.year", "order": "DESC"}]
    narrow = gateway.data(IDS_ONLY, {"input": {"query": "refund invoice charge", "collection": "tickets", "limit": 12,
                                               "sort": sort}})["search"]["hits"]
    full = _hits(gateway, sort=sort)["hits"]
    assert [h["chunk"] for h in narrow] == [{"sourceId": h["chunk"]["sourceId"], "chunkId": h["chunk"]["chunkId"]}
                                            for h in full]
    assert [h["chunk"]["sourceId"] for h in full] != [h["chunk"]["sourceId"] for h in _hits(gateway)["hits"]]


def test_a_sort_by_dates(gateway):
    full = _hits(gateway, sort=[{"field": "created_at", "order": "DESC"}], query="refund")["hits"]
    times = [h["provenance"]["ingestedAt"] for h in full]
    assert all(times) and times == sorted(times, reverse=True)


def test_bad_sorts_are_typed_errors_naming_the_value_and_the_allowed_set(gateway):
    def message(sort, collection="tickets"):
        error = gateway.error(SORTED, {"input": {"query": "refund", "collection": collection, "sort": sort}})
        assert error["extensions"]["code"] == "INVALID_INPUT"
        return error["message"]

    assert ("sort field 'score' is unknown; allowed: created_at, page, source_id, source_path, source_url, title, "
            "updated_at, or metadata.<key>") in message([{"field": "score"}])
    assert "sort field 'metadata.owner' is not filterable in every searched collection" in message(
        [{"field": "metadata.owner"}])
    assert "declared by all of them: none" in message([{"field": "metadata.year"}], collection="docs")
    assert "sort has 4 keys; allowed: at most 3" in message([{"field": f} for f in ("title", "page", "source_id",
                                                                                    "created_at")])
    assert "sort names 'title' twice" in message([{"field": "title"}, {"field": "title", "order": "DESC"}])
