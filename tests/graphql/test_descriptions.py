"""Every element of the schema is described; error codes and scalars are documented in it."""

import enum
from datetime import UTC, datetime

import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    specified_scalar_types,
)

from gateway.errors import ErrorCode
from gateway.graphql.enums import described
from gateway.graphql.schema import build_schema
from gateway.settings import Settings


def _schema() -> GraphQLSchema:
    return build_schema(Settings())._schema


def undescribed(schema: GraphQLSchema) -> list[str]:
    """Every type, field, argument, input field and enum value without a description."""
    missing: list[str] = []
    for name, t in schema.type_map.items():
        if name.startswith("__") or name in specified_scalar_types:  # introspection, graphql's own scalars
            continue
        if not (t.description or "").strip():
            missing.append(f"type {name}")
        if isinstance(t, (GraphQLObjectType, GraphQLInterfaceType)):
            for field_name, field in t.fields.items():
                if not (field.description or "").strip():
                    missing.append(f"field {name}.{field_name}")
                missing += [f"argument {name}.{field_name}({arg})" for arg, a in field.args.items()
                            if not (a.description or "").strip()]
        elif isinstance(t, GraphQLInputObjectType):
            missing += [f"input field {name}.{f}" for f, field in t.fields.items()
                        if not (field.description or "").strip()]
        elif isinstance(t, GraphQLEnumType):
            missing += [f"enum value {name}.{v}" for v, value in t.values.items()
                        if not (value.description or "").strip()]
    return missing


def test_every_schema_element_has_a_description():
    missing = undescribed(_schema())
    assert not missing, f"{len(missing)} schema elements have no description:\n" + "\n".join(missing)


def test_the_walk_finds_an_undescribed_element():
    schema = _schema()
    field = schema.type_map["Chunk"].fields["sourceId"]
    kept, field.description = field.description, None
    try:
        assert undescribed(schema) == ["field Chunk.sourceId"]
    finally:
        field.description = kept


def test_error_codes_are_an_enum_of_the_schema_with_every_code():
    codes = _schema().type_map["ErrorCode"]
    assert isinstance(codes, GraphQLEnumType)
    assert list(codes.values) == [code.name for code in ErrorCode]
    assert "extensions.code" in (codes.description or "")


@pytest.mark.parametrize(("scalar", "wire", "typescript"), [
    ("DateTime", "ISO 8601", "`string`"),
    ("JSON", "JSON value", "`unknown`"),
])
def test_custom_scalars_state_their_wire_format_and_typescript_type(scalar, wire, typescript):
    t = _schema().type_map[scalar]
    assert isinstance(t, GraphQLScalarType)
    assert wire in t.description and f"TypeScript: {typescript}" in t.description


def test_custom_scalars_keep_strawberrys_wire_format():
    schema = _schema()
    moment = datetime(2026, 1, 31, 9, 30, tzinfo=UTC)
    assert schema.type_map["DateTime"].serialize(moment) == "2026-01-31T09:30:00+00:00"
    assert schema.type_map["JSON"].parse_value({"a": [1, None]}) == {"a": [1, None]}


def test_an_enum_without_a_description_for_every_member_is_refused():
    class Colour(enum.Enum):
        RED = "red"
        BLUE = "blue"

    with pytest.raises(TypeError, match="enum Colour: .*missing: BLUE; not members: none"):
        described(Colour, name="Colour", description="A colour.", values={Colour.RED: "Red"})
