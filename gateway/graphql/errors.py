"""Error policy: domain errors keep their message and get `extensions.code`; the rest is masked.

Logging follows the same split. A client mistake is one INFO line with its code and path: no
query text (it can be a megabyte, and holds the client's data) and no traceback. Only an
unexpected error is logged at ERROR, with its traceback.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

import strawberry
from graphql import GraphQLError, VariableDefinitionNode
from strawberry.extensions import MaskErrors, SchemaExtension
from strawberry.schema.schema import DEFAULT_ALLOWED_OPERATION_TYPES, StrawberryGraphQLCoreExecutionContext
from strawberry.types.graphql import OperationType

from gateway.errors import ErrorCode, GatewayError
from gateway.graphql.documents import DocumentCache

log = logging.getLogger("gateway.errors")
MASKED_MESSAGE = "Unexpected error."
# Messages of Strawberry's depth and alias limiters and of graphql-core's token limit.
_LIMIT_MESSAGES = re.compile(r"exceeds maximum operation depth|aliases found|more than \d+ tokens|max tokens",
                             re.IGNORECASE)
_CODES = frozenset(code.value for code in ErrorCode)


class GatewaySchema(strawberry.Schema):
    """A schema whose error log never carries query text or a client mistake's traceback.

    `documents` is its parse and validation cache, which the cost estimate reads too.
    """

    def __init__(self, documents: DocumentCache, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.documents = documents

    async def execute(self, *args: Any, allowed_operation_types: Iterable[OperationType] | None = None,
                      **kwargs: Any) -> Any:
        """A one-shot answer never runs a subscription: those stream (SSE or multipart, which
        call `subscribe`). Strawberry would otherwise run one here and fail on its generator."""
        allowed = set(allowed_operation_types or DEFAULT_ALLOWED_OPERATION_TYPES) - {OperationType.SUBSCRIPTION}
        return await super().execute(*args, allowed_operation_types=allowed, **kwargs)

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        tenant = _tenant(execution_context)
        for error in errors:
            code = error_code(error)
            path = ".".join(str(p) for p in error.path or ()) or "-"
            if code is ErrorCode.INTERNAL:
                log.error("unexpected error tenant=%s path=%s type=%s", tenant, path,
                          type(error.original_error).__name__, exc_info=error.original_error)
            else:
                log.info("client error tenant=%s path=%s code=%s", tenant, path, code.value)


def error_code(error: GraphQLError) -> ErrorCode:
    """The code a client sees for `error` (before masking)."""
    original = error.original_error
    if isinstance(original, GatewayError):
        return original.code
    if original is not None and not isinstance(original, GraphQLError):
        return ErrorCode.INTERNAL
    preset = (error.extensions or {}).get("code")
    if preset in _CODES:
        return ErrorCode(preset)
    return ErrorCode.LIMIT_EXCEEDED if _LIMIT_MESSAGES.search(error.message) else ErrorCode.GRAPHQL_VALIDATION_FAILED


class CodedVariables(StrawberryGraphQLCoreExecutionContext):
    """Variable coercion errors come out as INVALID_VARIABLES with graphql-core's own message.

    graphql-core returns them from `build`, before any resolver runs; each points at the
    variable's definition. A scalar whose parser raised a plain exception (not a GraphQLError)
    is still the client's value failing to coerce, so its original error is dropped rather
    than letting the masking policy treat it as a server fault.
    """

    @classmethod
    def build(cls, *args: Any, **kwargs: Any) -> Any:
        built = super().build(*args, **kwargs)
        if not isinstance(built, list):
            return built
        return [_variable_error(error) for error in built]


def _variable_error(error: GraphQLError) -> GraphQLError:
    if not error.nodes or not all(isinstance(node, VariableDefinitionNode) for node in error.nodes):
        return error  # an operation-selection error: Strawberry answers those before execution
    return GraphQLError(message=error.message, nodes=error.nodes, source=error.source, positions=error.positions,
                        path=error.path, original_error=None,
                        extensions={**(error.extensions or {}), "code": ErrorCode.INVALID_VARIABLES.value})


class DomainErrors(MaskErrors):
    """Maps GatewayError to a coded error, codes GraphQL validation errors, masks everything else."""

    def __init__(self) -> None:
        super().__init__(error_message=MASKED_MESSAGE)

    def _process_errors(self, errors: list[GraphQLError]) -> list[GraphQLError]:
        return [self._process(error) for error in errors]

    def _process(self, error: GraphQLError) -> GraphQLError:
        code = error_code(error)
        if code is ErrorCode.INTERNAL:
            return _coded(self.anonymise_error(error), MASKED_MESSAGE, code)
        original = error.original_error
        message = original.message if isinstance(original, GatewayError) else error.message
        return _coded(error, message, code)


def _coded(error: GraphQLError, message: str, code: ErrorCode) -> GraphQLError:
    return GraphQLError(message=message, nodes=error.nodes, source=error.source, positions=error.positions,
                        path=error.path, original_error=None,
                        extensions={**(error.extensions or {}), "code": code.value})


def _tenant(execution_context: Any) -> str:
    principal = getattr(getattr(execution_context, "context", None), "principal", None)
    return getattr(principal, "tenant", "-")


class PartialFailures(SchemaExtension):
    """Names the collections a federated search had to leave out, in the response's extensions."""

    def get_results(self) -> dict[str, object]:
        context = self.execution_context.context
        failures = getattr(context, "partial_failures", None)
        return {"partialFailures": list(failures)} if failures else {}
