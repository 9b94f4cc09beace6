"""The schema's enums: the domain's closed sets, with a description for each value.

Each GraphQL enum is built from the domain's StrEnum (so a value added there reaches the
schema), and `described` refuses, at import, an enum whose value descriptions do not match its
members one for one: a new member without a description fails at start-up, never silently.
`ErrorCode` is in the schema although no field returns it: it documents `extensions.code`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

import strawberry

from gateway.embedding.base import Modality
from gateway.errors import ErrorCode
from gateway.grounding.citations import CitationStatus, SupportVerdict
from gateway.jobs.store import JobState
from gateway.retrieval import trace as tracing
from gateway.retrieval.facets import DateInterval
from gateway.retrieval.options import Fusion, Mode
from gateway.retrieval.shaping import GroupBy
from gateway.retrieval.sorting import SortOrder
from gateway.storage.filters import Op
from gateway.tenancy.config import Role, TrustTier

E = TypeVar("E", bound=type[Enum])


def described(cls: E, *, name: str, description: str, values: Mapping[Enum, str]) -> E:
    """`strawberry.enum(cls)` with one description per member; every member, and only those."""
    missing = [m.name for m in cls if m not in values]  # type: ignore[attr-defined]
    extra = [str(v) for v in values if not isinstance(v, cls) or v not in cls.__members__.values()]
    if missing or extra:
        raise TypeError(f"enum {name}: value descriptions must cover exactly its members; "
                        f"missing: {', '.join(missing) or 'none'}; not members: {', '.join(extra) or 'none'}")
    wrapped = strawberry.enum(cls, name=name, description=description)
    definition = wrapped.__strawberry_definition__  # type: ignore[attr-defined]
    by_value = {member.value: text for member, text in values.items()}
    definition.values = [dataclasses.replace(v, description=by_value[v.value]) for v in definition.values]
    return wrapped


ModeEnum = described(Mode, name="Mode", description=(
    "Which retrieval signals a search runs. The default is the collection's (CollectionInfo.mode)."), values={
    Mode.DENSE: "Embedding similarity only; needs an embedder (else MODE_NOT_SUPPORTED)",
    Mode.SPARSE: "BM25 keyword scoring only; needs no embedder",
    Mode.HYBRID: "Dense and sparse both, each list ranked on its own and then fused (see Fusion). A query with "
                 "no BM25 terms (only stop words or punctuation) runs dense only, and the trace warns",
})

FusionEnum = described(Fusion, name="Fusion", description=(
    "How a hybrid search fuses its dense and sparse lists into one ranking. Ignored, with a trace warning, "
    "when the search runs a single signal."), values={
    Fusion.RRF: "Reciprocal rank fusion: the sum of 1/(k + rank) over the lists (k = 60 unless the collection "
                "sets rrf_k), so only ranks count; alpha, when set, weighs the lists (alpha, 1 - alpha)",
    Fusion.DBSF: "Distribution-based score fusion: each list's scores scaled onto mean +- 3 standard "
                 "deviations, then summed (weighted by alpha when set)",
    Fusion.WEIGHTED: "Each list's scores min-max normalised onto 0 to 1, then alpha * dense + (1 - alpha) * "
                     "sparse",
})

TrustTierEnum = described(TrustTier, name="TrustTier", description=(
    "How far a collection's content can be trusted, as the tenant's configuration declares it (every "
    "collection has one; `trust_tier` in the tenant file). Lets a client or an agent weigh or label evidence."),
    values={
    TrustTier.FIRST_PARTY: "Written by the tenant's own organisation (e.g. its product documentation)",
    TrustTier.PARTNER: "Supplied by a partner the tenant has an agreement with",
    TrustTier.THIRD_PARTY: "From outside sources the tenant does not control",
    TrustTier.USER_GENERATED: "Written by end users (tickets, forum posts, memories): least trusted",
})

PhaseEnum = described(tracing.Phase, name="Phase", description="The part of a request a trace stage belongs to.",
                      values={
    tracing.Phase.ROUTE: "Choosing the collections (routers, or the collections the input named)",
    tracing.Phase.RETRIEVE: "Fetching and fusing hits: one retrieve:<namespace>/<collection> stage, or federate over several, "
                            "or fanout over a pipeline's planned queries",
    tracing.Phase.QUERY: "Rewriting or expanding the query before retrieval (a pipeline's queryPlanner, multiQuery "
                         "and hyde stages, a conversation's follow-up resolution)",
    tracing.Phase.HITS: "Working on the retrieved hits: a pipeline's hit stages (rerank, abstain, parentExpand, "
                        "compress, diversify, expand), the conversation record, and shape (autocut, grouping)",
})

StageStatusEnum = described(tracing.StageStatus, name="StageStatus", description="How a trace stage ended.",
                            values={
    tracing.StageStatus.OK: "The stage ran; its warnings (if any) say where it deviated from the request",
    tracing.StageStatus.SKIPPED: "The stage did not run; its warnings say why",
    tracing.StageStatus.FAILED: "The stage raised an error; the request's error (or partial failure) says which",
})

FilterOpEnum = described(Op, name="FilterOp", description=(
    "A filter condition's comparison between a field and its value. GT, GTE, LT and LTE compare numbers, "
    "strings or times, never booleans. Text fields take EQ to NIN, CONTAINS and PREFIX; created_at and "
    "updated_at take EQ to NIN, with epoch milliseconds or ISO 8601 dates as values; metadata.<key> takes "
    "every operator. Another operator on a field is INVALID_FILTER, naming the operators it takes."), values={
    Op.EQ: "Equal to value (one scalar)",
    Op.NE: "Not equal to value (one scalar)",
    Op.GT: "Greater than value (one scalar)",
    Op.GTE: "Greater than or equal to value (one scalar)",
    Op.LT: "Less than value (one scalar)",
    Op.LTE: "Less than or equal to value (one scalar)",
    Op.IN: "Equal to one of value (a list of scalars)",
    Op.NIN: "Equal to none of value (a list of scalars)",
    Op.CONTAINS: "The text holds value (a non-empty string) anywhere; case-sensitive, and % and _ are "
                 "plain characters, not wildcards",
    Op.PREFIX: "The text starts with value (a non-empty string); case-sensitive, and % and _ are plain "
               "characters",
    Op.EXISTS: "value true: the metadata key is present and not null; false: it is missing or null",
    Op.IS_NULL: "value true: the metadata key is missing or null; false: it is present and not null",
    Op.CONTAINS_ANY: "The metadata key holds a JSON list with at least one of value (a non-empty list)",
    Op.CONTAINS_ALL: "The metadata key holds a JSON list with every one of value (a non-empty list)",
})

ModalityEnum = described(Modality, name="Modality", description="What a chunk's vector was computed from.", values={
    Modality.TEXT: "Text: the chunk's content (title and text) was embedded",
    Modality.IMAGE: "An image (PNG or JPEG): the file was embedded by the collection's image encoder; the "
                    "content is its caption",
})

GroupByEnum = described(GroupBy, name="GroupBy", description="What a search's hits are grouped by.", values={
    GroupBy.SOURCE: "One group per source (namespace, collection and sourceId), holding its best hits; groups "
                    "are ordered by their best hit",
})

SortOrderEnum = described(SortOrder, name="SortOrder", description="The direction of one sort key.", values={
    SortOrder.ASC: "Smallest first: earliest date, lowest number, strings by Unicode code point",
    SortOrder.DESC: "Largest first: latest date, highest number, strings in reverse code-point order",
})

DateIntervalEnum = described(DateInterval, name="DateInterval", description=(
    "The calendar unit of a date facet's buckets, in UTC."), values={
    DateInterval.DAY: "One bucket per day, labelled 2026-11-26",
    DateInterval.WEEK: "One bucket per week starting on Monday, labelled by its Monday (2026-11-23)",
    DateInterval.MONTH: "One bucket per month, labelled 2026-11",
    DateInterval.YEAR: "One bucket per year, labelled 2026",
})

CitationStatusEnum = described(CitationStatus, name="CitationStatus", description=(
    "What validateCitations found for one [sourceId/chunkId] marker."), values={
    CitationStatus.VALID: "The marker names a chunk of the evidence, and its quote (if any) is in that chunk",
    CitationStatus.UNKNOWN: "The marker names no chunk of the evidence given",
    CitationStatus.MISQUOTED: "The quoted span right before the marker is not in the cited chunk (compared after "
                              "Unicode, case and whitespace normalisation)",
})

SupportVerdictEnum = described(SupportVerdict, name="SupportVerdict", description=(
    "Whether the cited chunk backs the sentence citing it, by the bundled cross-encoder's score on (sentence "
    "without markers, chunk content); it reads relevance, so a sentence contradicting its chunk on the chunk's "
    "own topic can still be SUPPORTED."), values={
    SupportVerdict.SUPPORTED: "The score is at or above supportedAt",
    SupportVerdict.WEAK: "The score is between weakAt and supportedAt: check it by hand",
    SupportVerdict.UNSUPPORTED: "The score is below weakAt: the chunk does not back the sentence (the report is "
                                "then not valid)",
})

RoleEnum = described(Role, name="Role", description="What an API key of a tenant may do.", values={
    Role.READER: "Search and read the tenant's collections",
    Role.WRITER: "A reader that also ingests into the tenant's own collections",
    Role.ADMIN: "A writer that also uses the admin API (statistics, compaction, clearing)",
})

JobStateEnum = described(JobState, name="JobState", description="Where an ingest job is in its life.", values={
    JobState.QUEUED: "Accepted, not started yet",
    JobState.RUNNING: "Documents are being chunked, embedded and written; done and percent grow",
    JobState.SUCCEEDED: "Finished; unreadable files (if any) are listed in errors, the rest were ingested",
    JobState.FAILED: "Stopped: no document or file was readable, or an error ended it (errors say which)",
})

ErrorCodeEnum = described(ErrorCode, name="ErrorCode", description=(
    "The closed set of `extensions.code` values on the errors of a GraphQL response (`errors[].extensions.code`). "
    "No field returns this type: it is in the schema to document the codes, and every error the gateway sends "
    "carries one of them. The message names the offending value and what is allowed. HTTP statuses are those "
    "under `Accept: application/graphql-response+json` (docs/http.md); with `application/json` a request that "
    "reached GraphQL answers 200."), values={
    ErrorCode.UNAUTHENTICATED: "No API key, or one the gateway does not know (HTTP 401 with WWW-Authenticate: "
                               "Bearer)",
    ErrorCode.FORBIDDEN: "The key may not do this. Found while executing (a reader key mutating, a non-admin key "
                         "on the admin API, a tenant key on the platform API): a field error in a 200 answer. Found "
                         "before executing (a deactivated tenant's key, the "
                         "platform key selecting a tenant operation, a CORS preflight from an origin that is not "
                         "allowed): HTTP 403 and nothing runs",
    ErrorCode.UNKNOWN_NAMESPACE: "The namespace is not in the caller's tenant; another tenant's names give the "
                                 "same answer",
    ErrorCode.UNKNOWN_COLLECTION: "The collection is not in the caller's tenant (the message lists those that "
                                  "are); another tenant's names give the same answer",
    ErrorCode.UNKNOWN_SOURCE: "No chunk of that sourceId in the collections searched (source)",
    ErrorCode.UNKNOWN_PIPELINE: "SearchInput.pipeline names a pipeline the tenant does not define; the message "
                                "lists those it does",
    ErrorCode.UNKNOWN_JOB: "An ingest job id the caller's tenant does not have (another tenant's ids too)",
    ErrorCode.UNKNOWN_TENANT: "Platform API: no tenant has that id; the message lists how many exist and how to "
                              "list them",
    ErrorCode.UNKNOWN_API_KEY: "Platform API: the tenant has no API key of that id; the message lists its key ids",
    ErrorCode.TENANT_CONFLICT: "Platform API: the tenant already exists, or is defined by a tenant file (GitOps "
                               "owns it: change the file); the message names the file",
    ErrorCode.NO_EVIDENCE: "`context` found no hits, so there is nothing to render; the message carries the "
                           "trace's reasons",
    ErrorCode.INVALID_FILTER: "A filter with an unknown field or operator, a value of the wrong shape or with "
                              "control characters, or over a cap (64 nodes, 8 levels, 1,024 values)",
    ErrorCode.INVALID_INPUT: "A value the gateway cannot accept: an empty query, a bad document or source id, a "
                             "page cursor of another search or caller, an argument out of range, or a malformed "
                             "HTTP body (HTTP 400)",
    ErrorCode.MODE_NOT_SUPPORTED: "The search mode cannot run here, e.g. dense or hybrid without an embedder",
    ErrorCode.LIMIT_EXCEEDED: "A request limit was passed (limit, query length, body size, depth, aliases, "
                              "tokens, documents or chunks per upsert, the tenant's cost ceiling); the message "
                              "names the figure and the limit (HTTP 413 when refused before execution)",
    ErrorCode.CONFIG_ERROR: "The gateway's or tenant's configuration is wrong (e.g. a callback router returned a "
                            "route the tenant does not define): an operator must fix it",
    ErrorCode.STORAGE_UNAVAILABLE: "Milvus failed or cannot be reached; retry later (/readyz says when it is back)",
    ErrorCode.UPSTREAM_UNAVAILABLE: "An embedding, language-model or rerank endpoint failed or answered "
                                    "malformed JSON",
    ErrorCode.GRAPHQL_VALIDATION_FAILED: "The document does not parse or validate against this schema (HTTP 400)",
    ErrorCode.INVALID_VARIABLES: "A variable does not coerce to its declared type: wrong enum value or scalar, a "
                                 "missing required variable, an unknown or missing input field; the message is "
                                 "graphql-core's (HTTP 400)",
    ErrorCode.PERSISTED_QUERY_NOT_FOUND: "Automatic persisted queries: this process does not know the hash for "
                                         "the tenant; send the full query with the hash once (HTTP 400)",
    ErrorCode.PERSISTED_QUERY_NOT_SUPPORTED: "A persisted-query hash was sent, and this gateway keeps no persisted "
                                             "queries (APQ is off)",
    ErrorCode.OPERATION_NOT_ALLOWED: "The tenant accepts only the operations of its manifest, and this is not "
                                     "one (HTTP 403)",
    ErrorCode.INTERNAL: "A bug: the message is masked (\"Unexpected error.\") and the traceback is in the "
                        "server log; never a client mistake",
    ErrorCode.RATE_LIMITED: "The tenant is over its request rate, cost rate or concurrency and its queue is full "
                            "or the wait ran out; the message says which limit (HTTP 429 with Retry-After)",
    ErrorCode.DEADLINE_EXCEEDED: "The request ran past its server-side deadline (default 15 s); the message says "
                                 "what was done (HTTP 504)",
})
