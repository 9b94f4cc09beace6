"""One list of search parameters: GraphQL's SearchInput and the MCP search tools cannot drift from it."""

import pytest

from gateway.errors import InvalidInput
from gateway.graphql.schema import build_schema
from gateway.mcp.tools import definitions
from gateway.retrieval.shaping import GroupBy, Shaping
from gateway.routing.parameters import PARAMETERS, SEARCH_PARAMETERS, search_request
from gateway.settings import Settings


def test_search_input_has_exactly_the_parameters_with_their_descriptions():
    fields = build_schema(Settings())._schema.type_map["SearchInput"].fields
    assert list(fields) == [p.name for p in SEARCH_PARAMETERS]
    assert {name: f.description for name, f in fields.items()} == {p.name: p.description for p in SEARCH_PARAMETERS}


def test_search_and_context_both_take_one_search_input():
    query = build_schema(Settings())._schema.query_type.fields
    assert str(query["search"].args["input"].type) == "SearchInput!"
    assert str(query["context"].args["input"].type) == "SearchInput!"
    assert set(query["search"].args) == {"input", "first", "after"}
    assert set(query["context"].args) == {"input", "maxChars", "maxTokens"}


def test_the_mcp_search_tool_takes_the_same_parameters():
    search = next(d for d in definitions(50) if d.name == "search")
    properties = search.parameters["properties"]
    assert list(properties) == [p.name for p in SEARCH_PARAMETERS]
    assert properties["limit"]["maximum"] == 50 and properties["groupBy"]["enum"] == ["SOURCE"]
    assert {name: p["description"] for name, p in properties.items()} == {
        p.name: p.description for p in SEARCH_PARAMETERS}


def test_search_request_maps_every_parameter():
    request = search_request({"query": "q", "conversationId": "c1", "autocut": 2, "groupBy": GroupBy.SOURCE,
                              "hitsPerGroup": 4, "collections": ["a", "b"], "metadata": {"k": "v"}})
    assert request.conversation_id == "c1" and request.collections == ("a", "b")
    assert request.shaping == Shaping(autocut=2, group_by=GroupBy.SOURCE, hits_per_group=4)
    assert dict(request.metadata) == {"k": "v"}
    with pytest.raises(ValueError, match="unknown search parameter"):
        search_request({"query": "q", "conversation_id": "c1"})
    assert set(PARAMETERS) == {p.name for p in SEARCH_PARAMETERS}


@pytest.mark.parametrize("values, message", [
    ({"autocut": 0}, "autocut 0 is out of range; allowed: 1 to 10"),
    ({"hitsPerGroup": 2}, "hitsPerGroup 2 needs groupBy; allowed groupBy: SOURCE"),
    ({"hitsPerGroup": 21, "groupBy": GroupBy.SOURCE}, "hitsPerGroup 21 is out of range; allowed: 1 to 20"),
    ({"metadata": [1]}, "metadata must be a JSON object, got list"),
])
def test_shaping_values_out_of_range_are_refused(values, message):
    with pytest.raises(InvalidInput, match=message):
        search_request({"query": "q", **values})


def test_a_query_vector_is_checked_once_and_query_may_then_be_absent():
    request = search_request({"vector": [1, 2, 2]})
    assert (request.query, request.vector.tolist()) == ("", [1.0, 2.0, 2.0])
    with pytest.raises(InvalidInput, match="image and vector are both given"):
        search_request({"query": "x", "vector": [1.0], "image": "aGVsbG8="})
    with pytest.raises(InvalidInput, match=r"query vector has a non-finite value \(nan\) at \[1\]"):
        search_request({"query": "x", "vector": [1.0, float("nan")]})


def test_highlights_change_what_is_shown_not_what_is_searched():
    # The same search, so the same cursors: GraphQL computes highlights from its selection.
    assert search_request({"query": "q", "highlights": True}) == search_request({"query": "q"})
