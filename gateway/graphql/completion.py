"""Plain object subtrees completed in one pass, without graphql-core's per-field machinery.

A full search page is about 250 fields (ten hits, each with its chunk, provenance and scores),
and every one of them is an attribute read: Strawberry's default resolver. graphql-core still
builds a resolve info, calls the resolver through Strawberry's wrapper, checks for an awaitable
and dispatches on the type for each, which was most of the event loop's GraphQL time per search.

`PlainCompletion` completes an object whose whole selected subtree is plain (attribute reads
with no arguments, no @defer/@stream, no abstract types, no `is_type_of`, no resolve
middleware) with a plan: the same field order, resolvers, output coercion and null checks,
fewer calls (a field with Strawberry's default resolver is read with `operator.attrgetter`,
what that resolver does). Anything the plan does not expect (a null in a non-null field, a value
that does not coerce, a resolver that raises) makes it give the object back to graphql-core,
which completes it again and reports the error exactly as it always did.

Building a search page's plans took about 160 µs of CPU, so they are kept with the cached
document (graphql/documents.py), across requests: the cache hands every request of a text the
same field nodes, and a plan is a function of the object type, those nodes and the values of the
variables the document's directives read.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from graphql import (
    DirectiveNode,
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    OperationDefinitionNode,
    Undefined,
    VariableNode,
    Visitor,
    visit,
)
from graphql.execution.collect_fields import FieldDetails, FragmentDetails
from graphql.execution.executor import Executor

from gateway.graphql.documents import DocumentCache, tenant_of

Complete = Callable[[Any], Any]
# Directives that collecting the fields has already applied; any other (@defer, @stream) is not plain.
_APPLIED = frozenset({"include", "skip"})


class NotPlain(Exception):
    """A value the plan cannot complete: graphql-core completes the object instead."""


class PlainCompletion(Executor):
    """An execution context that completes plain object subtrees in one pass (see the module).

    A subclass with `documents` set keeps its plans with the cached documents, across requests."""

    documents: ClassVar[DocumentCache | None] = None

    def complete_object_value(self, return_type: GraphQLObjectType, field_details_list: list[FieldDetails],
                              info: Any, path: Any, result: Any, position_context: Any) -> Any:
        # A position context is a deferred fragment's delivery group: graphql-core plans those.
        plan = self._object_plan(return_type, field_details_list) if position_context is None else None
        if plan is not None:
            try:
                return plan(result)
            except NotPlain:
                pass
        return super().complete_object_value(return_type, field_details_list, info, path, result, position_context)

    def _object_plan(self, object_type: GraphQLObjectType, details: list[FieldDetails]) -> Complete | None:
        plans: dict[tuple[GraphQLObjectType, int], tuple[list[FieldDetails], Complete | None]]
        plans = self.__dict__.setdefault("_plain_plans", {})
        key = (object_type, id(details))  # graphql-core memoizes its own collection on the same key
        known = plans.get(key)
        if known is not None:
            return known[1]
        plan = self._shared_plan(object_type, details)
        plans[key] = (details, plan)  # holding `details` keeps its id from being reused
        return plan

    def _shared_plan(self, object_type: GraphQLObjectType, details: list[FieldDetails]) -> Complete | None:
        documents, operation = self.documents, self.operation
        if documents is None or operation.loc is None:
            return self._build_object_plan(object_type, details)
        text, tenant = operation.loc.source.body, tenant_of(self.context_value)
        names = documents.derived(text, operation, (_directive_variables, id(operation)),
                                  lambda: _directive_variables(operation, self.fragments), tenant=tenant)
        directed = tuple(self.variable_values.coerced.get(name) for name in names)
        # The cached document holds these nodes as long as it holds the plan, so their ids stay theirs.
        key = (PlainCompletion, object_type, tuple(id(entry.node) for entry in details), directed)
        try:
            hash(key)
        except TypeError:  # a directive's variable holds a list or an object: not for a key
            return self._build_object_plan(object_type, details)
        return documents.derived(text, operation, key, lambda: self._build_object_plan(object_type, details),
                                 tenant=tenant)

    def _build_object_plan(self, object_type: GraphQLObjectType, details: list[FieldDetails]) -> Complete | None:
        if object_type.is_type_of is not None or self.middleware_manager and self.middleware_manager.middlewares:
            return None
        grouped, new_defer_usages, _ = self.collect_subfields(object_type, details)
        if new_defer_usages:
            return None
        fields: list[tuple[str, Complete]] = []
        for response_key, group in grouped.items():
            field = self._field_plan(object_type, group)
            if field is None:
                return None
            fields.append((response_key, field))
        return _object(fields)

    def _field_plan(self, object_type: GraphQLObjectType, group: list[FieldDetails]) -> Complete | None:
        for entry in group:
            node = entry.node
            if entry.defer_usage is not None or entry.fragment_variable_values is not None or node.arguments:
                return None
            if any(directive.name.value not in _APPLIED for directive in node.directives or ()):
                return None
        name = group[0].node.name.value
        if name == "__typename":
            type_name = object_type.name
            return lambda source: type_name
        definition = self.schema.get_field(object_type, name)
        if definition is None or definition.args or not getattr(definition.resolve, "_is_default", False):
            return None  # a resolver of its own (or an introspection field): graphql-core runs it
        value = self._value_plan(definition.type, group)
        if value is None:
            return None
        read = _attribute_read(definition)
        if read is not None:
            return lambda source: value(read(source))
        resolve = definition.resolve
        return lambda source: value(resolve(source, None))

    def _value_plan(self, type_: GraphQLOutputType, group: list[FieldDetails]) -> Complete | None:
        if isinstance(type_, GraphQLNonNull):
            inner = self._value_plan(type_.of_type, group)
            return None if inner is None else _non_null(inner)
        if isinstance(type_, GraphQLList):
            inner = self._value_plan(type_.of_type, group)
            return None if inner is None else _list(inner)
        if isinstance(type_, GraphQLLeafType):
            return _leaf(type_)
        if isinstance(type_, GraphQLObjectType):
            plan = self._object_plan(type_, group)
            return None if plan is None else _nullable(plan)
        return None  # an interface or union: its runtime type is graphql-core's to resolve


def _directive_variables(operation: OperationDefinitionNode,
                         fragments: Mapping[str, FragmentDetails]) -> tuple[str, ...]:
    """The variables any directive of the operation or its fragments reads (@include(if: $x)), sorted."""
    names: set[str] = set()

    class Directives(Visitor):
        def enter_directive(self, node: DirectiveNode, *_: Any) -> None:
            for argument in node.arguments or ():
                visit(argument, Variables())

    class Variables(Visitor):
        def enter_variable(self, node: VariableNode, *_: Any) -> None:
            names.add(node.name.value)

    for node in (operation, *(fragment.definition for fragment in fragments.values())):
        visit(node, Directives())
    return tuple(sorted(names))


def _attribute_read(definition: Any) -> Complete | None:
    """What Strawberry's default resolver of this field reads, as one call: its `get_result` without a
    resolver of its own is `default_resolver(source, python_name)`, and the default resolver is
    `getattr` unless the schema's config names another (then None: the resolver is called as is)."""
    field = (definition.extensions or {}).get("strawberry-definition")
    if field is None or field.base_resolver is not None or field.default_resolver is not getattr:
        return None
    return operator.attrgetter(field.python_name)


def _object(fields: list[tuple[str, Complete]]) -> Complete:
    def complete(source: Any) -> dict[str, Any]:
        try:
            return {key: field(source) for key, field in fields}
        except NotPlain:
            raise
        except Exception as error:  # a resolver's own failure: graphql-core reports it with its path
            raise NotPlain from error
    return complete


def _non_null(inner: Complete) -> Complete:
    def complete(value: Any) -> Any:
        completed = inner(value)
        if completed is None:
            raise NotPlain  # graphql-core raises "Cannot return null for non-nullable field ..."
        return completed
    return complete


def _nullable(inner: Complete) -> Complete:
    def complete(value: Any) -> Any:
        if value is None or value is Undefined:
            return None
        if isinstance(value, Exception):
            raise NotPlain  # graphql-core raises it as the field's error
        return inner(value)
    return complete


def _list(inner: Complete) -> Complete:
    def complete(value: Any) -> Any:
        if value is None or value is Undefined:
            return None
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise NotPlain  # graphql-core's own iterable checks and error
        return [inner(item) for item in value]
    return complete


def _leaf(type_: GraphQLLeafType) -> Complete:
    coerce = type_.coerce_output_value

    def complete(value: Any) -> Any:
        if value is None or value is Undefined:
            return None
        if isinstance(value, Exception):
            raise NotPlain
        coerced = coerce(value)
        if coerced is None or coerced is Undefined:
            raise NotPlain
        return coerced
    return complete
