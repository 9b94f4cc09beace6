"""Error policy: domain errors keep their message and get `extensions.code`; the rest is masked."""

from __future__ import annotations

import logging
import re

from graphql.error import GraphQLError
from strawberry.extensions import MaskErrors, SchemaExtension

from gateway.errors import ErrorCode, GatewayError

log = logging.getLogger("gateway.errors")
MASKED_MESSAGE = "Unexpected error."
# Messages of Strawberry's depth / alias / token limiters.
_LIMIT_MESSAGES = re.compile(r"exceeds maximum operation depth|aliases found|exceeds max tokens|max tokens",
                             re.IGNORECASE)


class DomainErrors(MaskErrors):
    """Maps GatewayError to a coded error, codes GraphQL validation errors, masks everything else."""

    def __init__(self) -> None:
        super().__init__(error_message=MASKED_MESSAGE)

    def _process_errors(self, errors: list[GraphQLError]) -> list[GraphQLError]:
        return [self._process(error) for error in errors]

    def _process(self, error: GraphQLError) -> GraphQLError:
        original = error.original_error
        if isinstance(original, GatewayError):
            return _coded(error, original.message, original.code)
        if original is None:
            code = ErrorCode.LIMIT_EXCEEDED if _LIMIT_MESSAGES.search(error.message) else ErrorCode.GRAPHQL_VALIDATION_FAILED
            return _coded(error, error.message, code)
        log.error("unexpected error in %s", error.path, exc_info=original)
        return _coded(self.anonymise_error(error), MASKED_MESSAGE, ErrorCode.INTERNAL)


def _coded(error: GraphQLError, message: str, code: ErrorCode) -> GraphQLError:
    return GraphQLError(message=message, nodes=error.nodes, source=error.source, positions=error.positions,
                        path=error.path, original_error=None,
                        extensions={**(error.extensions or {}), "code": code.value})


class PartialFailures(SchemaExtension):
    """Names the collections a federated search had to leave out, in the response's extensions."""

    def get_results(self) -> dict[str, object]:
        context = self.execution_context.context
        failures = getattr(context, "partial_failures", None)
        return {"partialFailures": list(failures)} if failures else {}
