"""Plain-subtree completion answers exactly what graphql-core's own completion answers."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

import pytest
import strawberry
from graphql.execution.executor import Executor
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.scalars import JSON

from gateway.graphql.completion import PlainCompletion
from gateway.graphql.errors import CodedVariables
from gateway.graphql.schema import Execution


class Fast(PlainCompletion, StrawberryGraphQLCoreExecutionContext):
    fields_executed = 0

    def execute_field(self, *args: Any, **kwargs: Any) -> Any:
        Fast.fields_executed += 1
        return super().execute_field(*args, **kwargs)


class Slow(StrawberryGraphQLCoreExecutionContext):
    pass


@strawberry.enum
class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@strawberry.interface
class Named:
    name: str


@strawberry.type
class Tag(Named):
    weight: float


@strawberry.type
class Score:
    signal: str
    raw: float
    rank: int


@strawberry.type
class Detail:
    colour: Colour
    scores: list[Score]
    note: str | None
    metadata: JSON
    required: str


@strawberry.type
class Item:
    id: strawberry.ID
    count: int
    detail: Detail
    maybe: Detail | None
    labels: list[str]
    tags: list[Tag]
    named: Named

    @strawberry.field
    def shout(self, suffix: str = "!") -> str:
        return self.id.upper() + suffix

    @strawberry.field
    async def later(self) -> Score:
        return Score(signal="later", raw=1.5, rank=9)


@dataclass
class Source:
    items: list[Any]
    extra: dict[str, Any] = field(default_factory=dict)


@strawberry.type
class Page:
    items: list[Item]


class Broken:
    """An Item whose `count` raises when read."""

    def __getattr__(self, name: str) -> Any:
        if name == "count":
            raise ValueError("count is unavailable")
        return getattr(_item(0), name)


def _detail(n: int, note: str | None = "n", required: Any = "r") -> Detail:
    return Detail(colour=Colour.RED if n % 2 else Colour.BLUE,
                  scores=[Score(signal="dense", raw=0.5 + n, rank=n), Score(signal="sparse", raw=3.0, rank=n + 1)],
                  note=note, metadata={"page": n, "tags": ["a", "b"]}, required=required)


def _item(n: int, **detail: Any) -> Item:
    return Item(id=strawberry.ID(f"i{n}"), count=n, detail=_detail(n, **detail), maybe=None if n % 2 else _detail(n),
                labels=[f"l{n}", "x"], tags=[Tag(name="t", weight=0.25)], named=Tag(name=f"n{n}", weight=1.0))


PAGES: dict[str, Page] = {}


@strawberry.type
class Query:
    @strawberry.field
    def page(self, kind: str = "good") -> Page:
        return PAGES[kind]


PAGES.update(
    good=Page(items=[_item(n) for n in range(4)]),
    null_in_non_null=Page(items=[_item(0), _item(1, required=None)]),
    bad_leaf=Page(items=[_item(2, required=object())]),
    raises=Page(items=[_item(0), Broken()]),  # type: ignore[list-item]
    null_item=Page(items=[_item(0), None]),  # type: ignore[list-item]
)


def run(context_class: type, document: str, variables: dict | None = None) -> tuple[Any, list[tuple]]:
    schema = strawberry.Schema(query=Query, execution_context_class=context_class)
    result = asyncio.run(schema.execute(document, variable_values=variables))
    errors = [(e.message, e.path) for e in result.errors or ()]
    return result.data, errors


DOCUMENTS = [
    '{ page { items { id count labels detail { colour note metadata required scores { signal raw rank } } '
    'maybe { colour } tags { name weight } } } }',
    # aliases, repeated fields merged, __typename at every level, fragments named and inline
    '{ page { __typename items { key: id id count n: count ...F ... on Item { detail { required } } } } } '
    'fragment F on Item { __typename detail { __typename scores { r: rank signal } } detail { note } }',
    # directives that depend on variables
    'query($a: Boolean!, $b: Boolean!) { page { items { id @include(if: $a) count @skip(if: $b) '
    'detail @include(if: $b) { note } } } }',
    # a field with arguments, an async resolver and an interface beside plain fields
    '{ page { items { id shout(suffix: "?") later { signal rank } named { name ... on Tag { weight } } '
    'detail { scores { rank } } } } }',
]


@pytest.mark.parametrize("document", DOCUMENTS)
@pytest.mark.parametrize("variables", [{"a": True, "b": False}, {"a": False, "b": True}])
def test_plain_completion_answers_what_graphql_core_answers(document, variables):
    fast = run(Fast, document, variables)
    assert fast == run(Slow, document, variables)
    assert fast[0] and not fast[1]


def test_a_plain_page_is_completed_without_executing_its_fields_one_by_one():
    plain = DOCUMENTS[0].replace("tags { name weight }", "")
    Fast.fields_executed = 0
    data, errors = run(Fast, plain)
    assert not errors and len(data["page"]["items"]) == 4
    assert Fast.fields_executed == 1  # `page`, which has a resolver; the ~90 fields below it are read in one pass
    for document in (DOCUMENTS[0], DOCUMENTS[3]):  # Tag has is_type_of (an interface); Item has resolvers
        Fast.fields_executed = 0
        run(Fast, document)
        assert Fast.fields_executed > 4


@pytest.mark.parametrize("kind", ["null_in_non_null", "bad_leaf", "raises", "null_item"])
def test_a_value_the_plan_does_not_expect_gets_graphql_cores_error_and_null_propagation(kind):
    document = '{ page(kind: "%s") { items { id count detail { required note } } } }' % kind
    fast = run(Fast, document)
    assert fast == run(Slow, document)
    assert fast[1]  # an error, with the same message and path


def test_the_gateways_execution_context_uses_plain_completion():
    assert issubclass(Execution, PlainCompletion)
    assert Execution.complete_object_value is PlainCompletion.complete_object_value
    assert Slow.complete_object_value is CodedVariables.complete_object_value is Executor.complete_object_value


SEARCH = ('query($q: String!, $withParent: Boolean!) { search(input: {query: $q, collection: "docs", limit: 6}) { '
          'totalCount pageInfo { hasNextPage endCursor } hits { rank score content ...H '
          'parent @include(if: $withParent) { parentId title summary metadata } } '
          'trace { warnings stages { name phase status inputCount outputCount warnings preview } } } } '
          'fragment H on SearchHit { __typename chunk { id namespace collection sourceId chunkId title sourceUrl '
          'sourcePath metadata modality } provenance { tenant namespace collection trustTier retriever mode route '
          'scores { signal raw rank } fusedScore contentHash ingestedAt updatedAt matchedQueries '
          'queryMatches { query kind rank score } originalChars via page } }')
GROUPED = ('{ search(input: {query: "refund", collection: "docs", limit: 10, groupBy: SOURCE, hitsPerGroup: 2}) '
           '{ groups { rank score sourceId hits { rank chunk { id title } content } } hits { chunk { id } } } }')


@pytest.mark.parametrize("with_parent", [False, True])
def test_the_gateways_search_pages_are_the_same_with_and_without_plain_completion(gateway, monkeypatch, with_parent):
    variables = {"q": "how do refunds work", "withParent": with_parent}
    fast = gateway.data(SEARCH, variables), gateway.data(GROUPED)
    assert fast[0]["search"]["hits"] and fast[1]["search"]["groups"]
    assert all(hit["content"] and hit["provenance"]["scores"] for hit in fast[0]["search"]["hits"])
    monkeypatch.setattr(Execution, "complete_object_value", Executor.complete_object_value)
    assert (gateway.data(SEARCH, variables), gateway.data(GROUPED)) == fast


@strawberry.type
class DictRow:
    label: str
    rank: int


@strawberry.type
class DictRows:
    @strawberry.field
    def rows(self) -> list[DictRow]:
        return [{"label": "a", "rank": 1}, {"label": "b", "rank": 2}]  # type: ignore[list-item]


def test_a_schema_with_a_default_resolver_of_its_own_is_read_through_it():
    """The plan reads a field with `operator.attrgetter` only where Strawberry's default resolver is
    `getattr`; a schema whose config names another resolver (here: dict keys) keeps it, in one pass."""
    import operator

    from strawberry.schema.config import StrawberryConfig

    schema = strawberry.Schema(query=DictRows, execution_context_class=Fast,
                               config=StrawberryConfig(default_resolver=operator.getitem))
    Fast.fields_executed = 0
    result = asyncio.run(schema.execute("{ rows { label rank } }"))
    assert not result.errors and result.data == {"rows": [{"label": "a", "rank": 1}, {"label": "b", "rank": 2}]}
    assert Fast.fields_executed == 1  # `rows`; its items' fields through the plan, not field by field


def test_plans_kept_across_requests_answer_as_graphql_core_for_each_requests_directive_variables():
    from gateway.graphql.documents import cached_documents, document_cache

    documents = document_cache(max_tokens=2000, max_depth=20, max_aliases=15)
    kept = type("Kept", (Fast,), {"documents": documents})
    schema = strawberry.Schema(query=Query, execution_context_class=kept, extensions=[cached_documents(documents)])
    built: list[str] = []
    build = PlainCompletion._build_object_plan

    def counted(self, object_type, details):
        built.append(object_type.name)
        return build(self, object_type, details)

    def answers() -> None:
        for variables in ({"a": True, "b": False}, {"a": False, "b": True}, {"a": True, "b": True}):
            for document in DOCUMENTS:
                result = asyncio.run(schema.execute(document, variable_values=variables))
                assert (result.data, [(e.message, e.path) for e in result.errors or ()]) == \
                    run(Slow, document, variables), (document, variables)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PlainCompletion, "_build_object_plan", counted)
        answers()
        assert built and len(documents) == len(DOCUMENTS)
        first = len(built)
        answers()
        assert len(built) == first  # the same documents' requests found their plans
