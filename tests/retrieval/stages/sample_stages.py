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


# -- customQuery stages: (question, queries, params) -> queries ------------------------------

def ticket_ids_as_filters(question, queries, params):
    """Next to the question as it was: the question again, by meaning, within each ticket id it names (`T-123`)."""
    from gateway.retrieval.options import Mode
    from gateway.retrieval.pipeline import PlannedQuery
    from gateway.storage.filters import Condition, Op

    ids = [word for word in question.split() if word.upper().startswith(params.get("prefix", "T-"))]
    return [*queries, *(PlannedQuery(question, kind="ticketId", weight=2.0, mode=Mode.DENSE,
                                     filter=Condition("source_id", Op.EQ, i)) for i in ids)]


async def rewrite_and_filter(question, queries, params):
    from gateway.retrieval.pipeline import PlannedQuery
    from gateway.storage.filters import Condition, Op

    return [PlannedQuery(params["text"], filter=Condition(params["field"], Op.EQ, params["value"]))]


def many(question, queries, params):
    from gateway.retrieval.pipeline import PlannedQuery

    return [PlannedQuery(f"{question} {i}") for i in range(params["count"])]


def returns(question, queries, params):
    from gateway.retrieval.pipeline import PlannedQuery

    return [PlannedQuery(**params["query"])] if "query" in params else params["value"]
