from strawberry.types.nodes import FragmentSpread, InlineFragment, SelectedField

from gateway.graphql.selection import stored_fields


def field(name: str, *selections) -> SelectedField:
    return SelectedField(name=name, directives={}, arguments={}, selections=list(selections), alias=None)


def search(*hit_fields, extra=()) -> list[SelectedField]:
    return [field("search", field("hits", *hit_fields), *extra)]


def test_identity_only_fetches_nothing_more():
    assert stored_fields(search(field("chunk", field("sourceId"), field("chunkId"), field("id")), field("score"),
                                field("rank"), extra=[field("pageInfo", field("endCursor")),
                                                      field("totalCount")])) == frozenset()


def test_each_hit_field_maps_to_what_it_reads_through_fragments():
    hits = search(field("content"), FragmentSpread("F", "SearchHit", {}, [field("chunk", field("title")), InlineFragment(
        "SearchHit", [field("parent", field("content"))], {})]), field("provenance", field("tenant")))
    assert stored_fields(hits) == {"text", "title", "parent_key", "content_hash", "created_at", "updated_at",
                                    "metadata"}  # provenance.page reads metadata


def test_grouped_hits_are_read_like_hits():
    grouped = [field("search", field("groups", field("sourceId"), field("hits", field("chunk", field("metadata")))))]
    assert stored_fields(grouped) == {"metadata"}


def test_a_trace_or_an_unknown_field_fetches_everything():
    assert stored_fields(search(field("score"), extra=[field("trace", field("stages"))])) is None
    assert stored_fields(search(field("somethingNew"))) is None
    assert stored_fields(search(field("chunk", field("somethingNew")))) is None


def test_the_answer_does_not_change_with_the_selection(gateway):
    narrow = '{ search(input: {query: "refund policy", collection: "docs", mode: HYBRID}) { hits { chunk { id } score } } }'
    wide = ('{ search(input: {query: "refund policy", collection: "docs", mode: HYBRID}) '
            '{ hits { chunk { id } score ...H } } } fragment H on SearchHit { content chunk { title } provenance { contentHash } }')
    few, all_ = gateway.data(narrow)["search"]["hits"], gateway.data(wide)["search"]["hits"]
    assert [(h["chunk"]["id"], h["score"]) for h in few] == [(h["chunk"]["id"], h["score"]) for h in all_]
    assert all(h["content"] and h["provenance"]["contentHash"] for h in all_)
    traced = gateway.data('{ search(input: {query: "refund policy", collection: "docs"}) '
                          '{ hits { chunk { id } } trace { stages { preview } } } }')["search"]
    assert any(stage["preview"] for stage in traced["trace"]["stages"])


def test_a_selection_is_worked_out_once_per_document_but_directives_every_time(gateway):
    from gateway.graphql import selection

    text = '{ search(input: {query: "refund policy", collection: "docs"}) { hits { content chunk { id } } } }'
    selection._SELECTIONS.clear()
    first = gateway.data(text)["search"]["hits"]
    assert len(selection._SELECTIONS) == 1 and gateway.data(text)["search"]["hits"] == first
    [(_, remembered)] = selection._SELECTIONS.values()
    assert remembered == selection.SearchSelection(frozenset({"text"}), page_info=False)
    # @include depends on the variables: never remembered, and each request reads what it selects.
    directed = ('query($c: Boolean!) { search(input: {query: "refund policy", collection: "docs"}) '
                '{ hits { chunk { id } ...F } } } fragment F on SearchHit { content @include(if: $c) }')
    shown = gateway.data(directed, {"c": True})["search"]["hits"]
    hidden = gateway.data(directed, {"c": False})["search"]["hits"]
    assert all(h["content"] for h in shown) and all("content" not in h for h in hidden)
    assert len(selection._SELECTIONS) == 1
