"""The schema's custom scalars, described with their wire format and TypeScript mapping.

Strawberry's own DateTime and JSON definitions are kept (same parsing and serialising) and only
their descriptions replaced, through the schema's `scalar_overrides`: codegen users read the
description to pick a mapping (examples/typescript/codegen.yml uses these; docs/clients.md).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from strawberry.scalars import JSON
from strawberry.schema.types.scalar import DEFAULT_SCALAR_REGISTRY
from strawberry.types.scalar import ScalarDefinition

DATETIME = (
    "A point in time, sent as an ISO 8601 string with a UTC offset, e.g. `2026-01-31T09:30:00+00:00` or "
    "`2026-01-31T09:30:00.125000+00:00` (microseconds appear only when not zero). The gateway always sends UTC "
    "(+00:00). TypeScript: `string` (parse with `new Date(value)`)."
)
JSON_VALUE = (
    "Any JSON value (ECMA-404) sent as itself, not as an encoded string: an object, array, string, number, "
    "boolean or null. Numbers are finite (no NaN or Infinity) and integers fit in 64 bits. The field says which "
    "shape to expect (metadata and trace details are objects, toolDefinitions a list, a filter value a scalar or "
    "a list). TypeScript: `unknown`, or `string | number | boolean | null | { [key: string]: unknown } | "
    "unknown[]`."
)


def _described(python_type: object, description: str) -> ScalarDefinition:
    definition = DEFAULT_SCALAR_REGISTRY[python_type]
    return dataclasses.replace(definition, description=description)


def scalar_overrides() -> dict[object, ScalarDefinition]:
    """Strawberry's DateTime and JSON, with descriptions for clients (`Schema(scalar_overrides=...)`)."""
    return {datetime: _described(datetime, DATETIME), JSON: _described(JSON, JSON_VALUE)}
