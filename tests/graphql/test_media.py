"""Accept negotiation for GraphQL answers (gateway/graphql/media.py)."""

import pytest

from gateway.graphql.media import Media, negotiate


@pytest.mark.parametrize("accept, expected", [
    (None, Media.JSON),
    ("", Media.JSON),
    ("*/*", Media.JSON),
    ("application/json", Media.JSON),
    ("application/graphql-response+json", Media.GRAPHQL_RESPONSE),
    # Apollo Client 4 and urql send this: the spec's type first, JSON as a fallback.
    ("application/graphql-response+json, application/json;q=0.9", Media.GRAPHQL_RESPONSE),
    ("application/json, application/graphql-response+json", Media.GRAPHQL_RESPONSE),  # a tie: the spec's type
    ("application/json;q=1, application/graphql-response+json;q=0.5", Media.JSON),
    ("application/graphql-response+json;q=0", Media.JSON),
    ("APPLICATION/GRAPHQL-RESPONSE+JSON; charset=utf-8", Media.GRAPHQL_RESPONSE),
    ("text/html, application/graphql-response+json;q=oops", Media.JSON),
])
def test_negotiate_picks_the_preferred_graphql_media_type(accept, expected):
    assert negotiate(accept) is expected
