"""The named domain errors. Each message names the offending value and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class ErrorCode(StrEnum):
    """The closed set of `extensions.code` values a client can see."""

    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    UNKNOWN_NAMESPACE = "UNKNOWN_NAMESPACE"
    UNKNOWN_COLLECTION = "UNKNOWN_COLLECTION"
    UNKNOWN_SOURCE = "UNKNOWN_SOURCE"
    UNKNOWN_PIPELINE = "UNKNOWN_PIPELINE"
    UNKNOWN_JOB = "UNKNOWN_JOB"
    # Platform API: a tenant id or API key id that does not exist.
    UNKNOWN_TENANT = "UNKNOWN_TENANT"
    UNKNOWN_API_KEY = "UNKNOWN_API_KEY"
    # Platform API: the tenant already exists, or is owned by a tenant file (GitOps).
    TENANT_CONFLICT = "TENANT_CONFLICT"
    NO_EVIDENCE = "NO_EVIDENCE"
    INVALID_FILTER = "INVALID_FILTER"
    INVALID_INPUT = "INVALID_INPUT"
    MODE_NOT_SUPPORTED = "MODE_NOT_SUPPORTED"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    CONFIG_ERROR = "CONFIG_ERROR"
    STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
    UPSTREAM_UNAVAILABLE = "UPSTREAM_UNAVAILABLE"
    GRAPHQL_VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"
    # A variable's value does not coerce to its declared type: wrong enum value or scalar, a
    # missing required variable, an unknown or missing input field (HTTP 400 with
    # application/graphql-response+json).
    INVALID_VARIABLES = "INVALID_VARIABLES"
    # Automatic persisted queries (Apollo's protocol): the hash is not registered in this process
    # for this tenant, so the client sends the full query once; or this gateway keeps none.
    PERSISTED_QUERY_NOT_FOUND = "PERSISTED_QUERY_NOT_FOUND"
    PERSISTED_QUERY_NOT_SUPPORTED = "PERSISTED_QUERY_NOT_SUPPORTED"
    # The tenant accepts only the operations of its manifest (tenant `operations:`), and this is not one.
    OPERATION_NOT_ALLOWED = "OPERATION_NOT_ALLOWED"
    INTERNAL = "INTERNAL"
    RATE_LIMITED = "RATE_LIMITED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"


def allowed(values: Iterable[object]) -> str:
    """Render an allowed set for a message: sorted, comma-separated, or 'none'."""
    rendered = sorted(str(v) for v in values)
    return ", ".join(rendered) if rendered else "none"


class GatewayError(Exception):
    """Base of every expected failure; `code` is what clients see."""

    code: ErrorCode = ErrorCode.INVALID_INPUT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthenticated(GatewayError):
    code = ErrorCode.UNAUTHENTICATED


class Forbidden(GatewayError):
    code = ErrorCode.FORBIDDEN


class UnknownNamespace(GatewayError):
    code = ErrorCode.UNKNOWN_NAMESPACE


class UnknownCollection(GatewayError):
    code = ErrorCode.UNKNOWN_COLLECTION


class UnknownSource(GatewayError):
    code = ErrorCode.UNKNOWN_SOURCE


class UnknownPipeline(GatewayError):
    code = ErrorCode.UNKNOWN_PIPELINE


class UnknownJob(GatewayError):
    """An ingest job id the caller's tenant does not have (another tenant's ids are unknown too)."""

    code = ErrorCode.UNKNOWN_JOB


class UnknownTenant(GatewayError):
    code = ErrorCode.UNKNOWN_TENANT


class UnknownApiKey(GatewayError):
    code = ErrorCode.UNKNOWN_API_KEY


class TenantConflict(GatewayError):
    """A platform change that collides with what exists: a duplicate id, or a tenant a file owns."""

    code = ErrorCode.TENANT_CONFLICT


class NoEvidence(GatewayError):
    """A context block was asked for, and retrieval found nothing to put in it."""

    code = ErrorCode.NO_EVIDENCE


class InvalidFilter(GatewayError):
    code = ErrorCode.INVALID_FILTER


class InvalidInput(GatewayError):
    code = ErrorCode.INVALID_INPUT


class DimensionMismatch(InvalidInput):
    """A client's vector whose size is not the collection's: "vector of documents[3].chunks[1] has
    768 dimensions; collection support/faq stores 384"."""


class UnsupportedMediaType(InvalidInput):
    """A request body whose Content-Type the endpoint does not read; HTTP 415."""


class PersistedQueryNotFound(GatewayError):
    code = ErrorCode.PERSISTED_QUERY_NOT_FOUND


class PersistedQueryNotSupported(GatewayError):
    code = ErrorCode.PERSISTED_QUERY_NOT_SUPPORTED


class OperationNotAllowed(GatewayError):
    code = ErrorCode.OPERATION_NOT_ALLOWED


class ModeNotSupported(GatewayError):
    code = ErrorCode.MODE_NOT_SUPPORTED


class LimitExceeded(GatewayError):
    code = ErrorCode.LIMIT_EXCEEDED


class CollectionFull(LimitExceeded):
    """A write would take a collection of the embedded store past GATEWAY_EMBEDDED_MAX_CHUNKS."""


class ConfigError(GatewayError):
    """A settings or tenant-file problem found at start-up."""

    code = ErrorCode.CONFIG_ERROR


class ModelFileMismatch(ConfigError):
    """A model file whose size or sha256 is not its pin (gateway/embedding/models.py): it is never
    loaded. The message names the file, the expected and the actual value, and where to get it."""


class StorageUnavailable(GatewayError):
    """Milvus cannot be reached or opened (e.g. another process holds a milvus-lite directory)."""

    code = ErrorCode.STORAGE_UNAVAILABLE


class StoreRefused(StorageUnavailable):
    """A milvus-lite store was not opened because it is damaged or cannot be checked: re-running the
    same command will not help (the CLI exits 1, not 75). The message names the file and the way out."""


class UpstreamUnavailable(GatewayError):
    """An embedding, language-model or rerank endpoint failed or answered nonsense."""

    code = ErrorCode.UPSTREAM_UNAVAILABLE


class RateLimited(GatewayError):
    """A tenant is over its request rate, cost rate or concurrency; HTTP 429 with Retry-After."""

    code = ErrorCode.RATE_LIMITED

    def __init__(self, message: str, *, reason: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class DeadlineExceeded(GatewayError):
    """A request ran past its deadline (or its client went away); the message says what was done."""

    code = ErrorCode.DEADLINE_EXCEEDED
