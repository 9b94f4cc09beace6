"""Entry points for the custom-stage tests."""

from dataclasses import replace


def boost_titles(query, hits, params):
    factor = params.get("factor", 2.0)
    return sorted((replace(h, score=h.score * factor) if h.title else h for h in hits), key=lambda h: -h.score)


async def keep_first(query, hits, params):
    return hits[:1]


def invent(query, hits, params):
    return [replace(hits[0], source_id="someone-elses")]


def not_a_list(query, hits, params):
    return "nope"


def wrong_shape(query):
    return []
