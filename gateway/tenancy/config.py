"""Tenant configuration models, validated once when tenants/*.yaml is loaded."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo, model_validator

from gateway.embedding.base import Modality
from gateway.embedding.modal import ENCODER_MODALITIES, MULTIMODAL_DOCS, ImageEncoder
from gateway.errors import InvalidFilter
from gateway.retrieval.options import Fusion, Mode
from gateway.storage.indexes import (
    AUTO_ROWS,
    CLUSTERED,
    GRAPH,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    IVF_NLIST,
    IVF_NPROBE,
    DenseIndex,
    DenseIndexKind,
)
from gateway.storage.analyzer import Language
from gateway.storage.filters import FilterNode, compile_filter, filter_from_json
from gateway.storage.schema import Isolation
from gateway.tenancy.pipelines import ENTRY_POINT, LlmConfig, PipelineConfig

Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")]
NAME_RULE = "lowercase letters, digits, '-' and '_', starting with a letter or digit, at most 63"
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
# 48 bits of the digest: unique among a tenant's keys (checked when one is added), and no use to a guesser.
KEY_ID_CHARS = 12
EntryPoint = Annotated[str, StringConstraints(pattern=ENTRY_POINT)]
# MCP tool names allow [A-Za-z0-9_-]; a camelCase prefix reads like the base tools (`docsSearch`).
ToolPrefix = Annotated[str, StringConstraints(pattern=r"^[a-z][A-Za-z0-9]{0,31}$")]


class TrustTier(StrEnum):
    """How far a collection's content can be trusted; every collection must declare one."""

    FIRST_PARTY = "first-party"
    PARTNER = "partner"
    THIRD_PARTY = "third-party"
    USER_GENERATED = "user-generated"


# Most trusted first: a record's tier may sit at or below its collection's, never above.
TRUST_ORDER = (TrustTier.FIRST_PARTY, TrustTier.PARTNER, TrustTier.THIRD_PARTY, TrustTier.USER_GENERATED)
MetadataKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]


def metadata_value_key(value: Any) -> str | None:
    """How a metadata value is looked up in a value map: a string as itself, a number or boolean as its JSON
    text (`true`, `3`); None for a missing value, null, a list or an object (they map to nothing)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return None


class Role(StrEnum):
    READER = "reader"   # query
    WRITER = "writer"   # query, and ingest into its own tenant
    ADMIN = "admin"     # all of the above, and manage


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApiKeyConfig(_Strict):
    """A key as its sha256 hex digest, or the name of an environment variable holding it."""

    sha256: str | None = None
    env: str | None = None
    role: Role = Role.READER
    # Binds the key to one user's memories: in `kind: memory` collections it reads, writes and
    # deletes only rows whose metadata.user_id is this (docs/conversations.md, "Memories").
    user_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")

    @property
    def key_id(self) -> str | None:
        """The key's public id (`revokeApiKey`): the first 12 hex digits of its digest; None for env keys."""
        return self.sha256[:KEY_ID_CHARS] if self.sha256 is not None else None

    @model_validator(mode="after")
    def _one_source(self) -> ApiKeyConfig:
        if (self.sha256 is None) == (self.env is None):
            raise ValueError("give exactly one of 'sha256' (hex digest of the key) or 'env' "
                             "(an environment variable holding the key); plain keys are not accepted")
        if self.sha256 is not None and not SHA256_HEX.match(self.sha256):
            raise ValueError(f"sha256 {self.sha256!r} is not 64 lowercase hex characters")
        if self.user_id is not None and self.role is Role.ADMIN:
            raise ValueError(f"user_id {self.user_id!r} on an admin key: an admin manages the whole tenant, so only "
                             "reader and writer keys can be bound to a user")
        return self


class ChunkingConfig(_Strict):
    """Parent/child chunking, in characters; children are searched, parents are for expansion."""

    child_chars: int = Field(default=1000, ge=100, le=16_000)
    child_overlap: int = Field(default=150, ge=0)
    parent_chars: int = Field(default=4000, ge=100, le=16_000)

    @model_validator(mode="after")
    def _sizes(self) -> ChunkingConfig:
        if self.child_overlap >= self.child_chars:
            raise ValueError(f"child_overlap {self.child_overlap} must be below child_chars {self.child_chars}")
        if self.parent_chars < self.child_chars:
            raise ValueError(f"parent_chars {self.parent_chars} must be at least child_chars {self.child_chars}")
        return self


class CollectionKind(StrEnum):
    DOCUMENTS = "documents"   # chunked documents (the default)
    MEMORY = "memory"         # agent memories: one row each, scored by recency, relevance and importance


# Metadata keys of every memory row (filterable: `metadata.user_id`, `metadata.memory_type`).
MEMORY_FIELDS = ("user_id", "memory_type", "importance")


class MemoryConfig(_Strict):
    """How a `kind: memory` collection scores: alpha*recency + beta*relevance + gamma*importance.

    recency = 0.5 ** (age / half_life_days); relevance is the query similarity in [0, 1];
    importance is the memory's own 0-1 value (docs/conversations.md).
    """

    alpha: float = Field(default=0.3, ge=0.0, le=1.0)
    beta: float = Field(default=0.5, ge=0.0, le=1.0)
    gamma: float = Field(default=0.2, ge=0.0, le=1.0)
    half_life_days: float = Field(default=7.0, gt=0, le=36_500)
    types: tuple[Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,31}$")], ...] = (
        "episodic", "semantic", "procedural")
    # Characters of one memory's content.
    max_chars: int = Field(default=4000, ge=1, le=16_000)

    @model_validator(mode="after")
    def _weights(self) -> MemoryConfig:
        if self.alpha + self.beta + self.gamma <= 0:
            raise ValueError("alpha, beta and gamma are all 0: at least one must weigh something")
        if not self.types:
            raise ValueError("types is empty; name at least one memory type")
        return self


class GraphConfig(_Strict):
    """Inferred similarity edges, computed at ingest (docs/conversations.md, graph expansion)."""

    # Cosine similarity at or above which a chunk gets an edge to another source's chunk; None: no inferred edges.
    infer_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    # Edges kept per chunk (its most similar other sources).
    infer_per_node: int = Field(default=3, ge=1, le=20)


class IndexConfig(_Strict):
    """A collection's dense index (docs/configuration.md, "Dense index"); BM25 always has its inverted index."""

    dense: DenseIndexKind = DenseIndexKind.AUTO
    # auto: exact search (FLAT) below this many chunks, HNSW from it (milvus-lite; a server builds HNSW always).
    auto_rows: int = Field(default=AUTO_ROWS, ge=1)
    # HNSW and HNSW_SQ: graph degree, build depth, search depth (raised to the hits asked for; unset:
    # by the collection's rows, storage/indexes.py EF_BY_ROWS).
    m: int = Field(default=HNSW_M, ge=2, le=2048)
    ef_construction: int = Field(default=HNSW_EF_CONSTRUCTION, ge=1, le=65_536)
    ef: int | None = Field(default=None, ge=1, le=65_536)
    # IVF_FLAT and IVF_SQ8: lists per segment, and how many of them a search reads.
    nlist: int = Field(default=IVF_NLIST, ge=1, le=65_536)
    nprobe: int = Field(default=IVF_NPROBE, ge=1, le=65_536)

    @model_validator(mode="after")
    def _applies(self) -> IndexConfig:
        kind = self.dense
        reads = {"auto_rows": kind is DenseIndexKind.AUTO,
                 "m": kind is DenseIndexKind.AUTO or kind.index_type in GRAPH,
                 "ef_construction": kind is DenseIndexKind.AUTO or kind.index_type in GRAPH,
                 "ef": kind is DenseIndexKind.AUTO or kind.index_type in GRAPH,
                 "nlist": kind.index_type in CLUSTERED, "nprobe": kind.index_type in CLUSTERED}
        # A setting at its default is not refused: a dumped config (model_dump) validates again.
        unread = sorted(name for name in self.model_fields_set if name in reads and not reads[name]
                        and getattr(self, name) != type(self).model_fields[name].default)
        if unread:
            used = [name for name, read in reads.items() if read]
            raise ValueError(f"dense {kind.value!r} does not read {', '.join(unread)}; it reads: "
                             f"{', '.join(used) or 'no parameters'}")
        if kind.index_type in CLUSTERED and self.nprobe > self.nlist:
            raise ValueError(f"nprobe {self.nprobe} is more than nlist {self.nlist}; allowed: 1 to {self.nlist}")
        return self

    def policy(self) -> DenseIndex:
        return DenseIndex(kind=self.dense, auto_rows=self.auto_rows, m=self.m, ef_construction=self.ef_construction,
                          ef=self.ef, nlist=self.nlist, nprobe=self.nprobe)


class TrustRuleConfig(_Strict):
    """A record's trust tier from one of its metadata values (`trust_by`).

    The collection's `trust_tier` is both the default (a record whose value is missing or not in `tiers`)
    and the ceiling (`tiers` may only name tiers at or below it: a record is never trusted more than its
    collection). Values are matched as strings; numbers and booleans by their JSON text (`true`, `3`).
    """

    field: MetadataKey
    tiers: dict[str, TrustTier]

    def __hash__(self) -> int:
        # A collection's config is hashed (CollectionRef is a set and dict key); a dict field is not hashable.
        return hash((self.field, tuple(sorted(self.tiers.items()))))

    @model_validator(mode="after")
    def _not_empty(self) -> TrustRuleConfig:
        if not self.tiers:
            raise ValueError(f"trust_by.tiers is empty; map at least one value of metadata.{self.field} to a tier "
                             f"({', '.join(t.value for t in TRUST_ORDER)})")
        return self


CONTENT_KEY = re.compile(r"^(title|content|metadata\.[A-Za-z_][A-Za-z0-9_]{0,63})$")
CONTENT_KEY_RULE = "title, content (the chunk's text), or metadata.<key>"
DEFAULT_CONTENT_KEYS = ("title", "content")


class ContentKeysConfig(_Strict):
    """Which fields of a record are embedded (the dense vector) and which BM25-indexed, in this order.

    `content` is the chunk's text; `metadata.<key>` a metadata value (a list is joined with ', '). The hit's
    content is always the chunk's text: these decide what the vector and the index see, not what is returned.
    """

    embed: tuple[str, ...] = DEFAULT_CONTENT_KEYS
    index: tuple[str, ...] = DEFAULT_CONTENT_KEYS

    @model_validator(mode="after")
    def _keys(self) -> ContentKeysConfig:
        for name in ("embed", "index"):
            keys = tuple(dict.fromkeys(getattr(self, name)))
            if not keys:
                raise ValueError(f"content_keys.{name} is empty; allowed: a list of {CONTENT_KEY_RULE}")
            for key in keys:
                if not CONTENT_KEY.match(key):
                    raise ValueError(f"content_keys.{name}: {key!r} is not a content key; allowed: {CONTENT_KEY_RULE}")
            object.__setattr__(self, name, keys)
        return self

    @property
    def is_default(self) -> bool:
        return self.embed == DEFAULT_CONTENT_KEYS and self.index == DEFAULT_CONTENT_KEYS

    @property
    def tag(self) -> str:
        """What a chunk's content hash covers of this setting: empty for the default (so that hashes stored
        before it existed still hold), else both lists, so a change re-embeds and re-indexes every chunk."""
        return "" if self.is_default else f"embed={','.join(self.embed)};index={','.join(self.index)}"


class SearchConfig(_Strict):
    """What every search of a collection gets, whatever the request says."""

    # A filter in the JSON form query planners write ({field, op, value} / and / or / not), ANDed
    # with the request's own; checked against the collection's fields when the file is read.
    filter: dict[str, Any] | None = None

    def __hash__(self) -> int:
        # Configs are frozen and hashed; a JSON object is not hashable, its canonical text is.
        return hash(json.dumps(self.filter, sort_keys=True))


class CollectionConfig(_Strict):
    trust_tier: TrustTier  # no default: an unlabelled collection is a configuration error
    description: str = ""
    mode: Mode = Mode.HYBRID
    fusion: Fusion = Fusion.RRF
    alpha: float | None = Field(default=None, ge=0.0, le=1.0)
    rrf_k: int = Field(default=60, ge=1)
    limit: int = Field(default=10, ge=1, le=1000)
    # Candidates per signal before fusion (and the depth of a plain search before `limit`).
    candidates: int = Field(default=50, ge=1, le=2000)
    threshold: float | None = None
    # One hit per source (its best chunk), applied to each signal before fusion.
    group_by_source: bool = False
    metadata_fields: tuple[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")], ...] = ()
    chunking: ChunkingConfig = ChunkingConfig()
    source_url_template: str | None = None
    # The pipeline a search of this collection runs unless the request names one.
    pipeline: Name | None = None
    # `module:function(request) -> chunks` that replaces Milvus retrieval (gateway/retrieval/custom.py).
    retriever: EntryPoint | None = None
    # MCP and toolDefinitions: a `<prefix>Search` / `<prefix>GetSource` pair for this collection.
    tool_prefix: ToolPrefix | None = None
    graph: GraphConfig = GraphConfig()
    kind: CollectionKind = CollectionKind.DOCUMENTS
    # Scoring of a `kind: memory` collection (defaults when omitted); refused on documents.
    memory: MemoryConfig | None = None
    # What the collection holds, and for images the encoder of their vectors (docs/multimodal.md).
    modality: tuple[Modality, ...] = (Modality.TEXT,)
    image_encoder: ImageEncoder | None = None
    index: IndexConfig = IndexConfig()
    # A record's trust tier from its metadata; `trust_tier` stays the default and the ceiling.
    trust_by: TrustRuleConfig | None = None
    # Which of title, content and metadata.<key> are embedded and which BM25-indexed (default: title, content).
    content_keys: ContentKeysConfig = Field(default=ContentKeysConfig(),
                                            validation_alias=AliasChoices("content_keys", "contentKeys"))

    def record_tier(self, metadata: Mapping[str, Any]) -> TrustTier:
        """The trust tier of one record of this collection: `trust_by`'s tier for its metadata value, else the
        collection's `trust_tier`."""
        rule = self.trust_by
        if rule is None:
            return self.trust_tier
        key = metadata_value_key(metadata.get(rule.field))
        return rule.tiers.get(key, self.trust_tier) if key is not None else self.trust_tier

    @model_validator(mode="after")
    def _trust_ceiling(self) -> CollectionConfig:
        if self.trust_by is None:
            return self
        ceiling = TRUST_ORDER.index(self.trust_tier)
        allowed_tiers = ", ".join(t.value for t in TRUST_ORDER[ceiling:])
        for value, tier in self.trust_by.tiers.items():
            if TRUST_ORDER.index(tier) < ceiling:
                raise ValueError(
                    f"trust_by.tiers maps {value!r} to {tier.value!r}, above the collection's trust_tier "
                    f"{self.trust_tier.value!r}, which is the ceiling: a record is never trusted more than its "
                    f"collection; allowed: {allowed_tiers}")
        return self
    # How BM25 analyses this collection's text and queries (storage/analyzer.py); `none` for ids and codes.
    language: Language = Language.EN
    search: SearchConfig = SearchConfig()

    @model_validator(mode="after")
    def _modality(self) -> CollectionConfig:
        declared = tuple(dict.fromkeys(self.modality))
        if not declared:
            raise ValueError(f"modality is empty; allowed: a list of {', '.join(m.value for m in Modality)}")
        object.__setattr__(self, "modality", declared)
        if Modality.IMAGE not in declared:
            if self.image_encoder is not None:
                raise ValueError(f"image_encoder {self.image_encoder.value!r} needs modality: [image]; "
                                 "this collection holds text only")
            return self
        names = "[" + ", ".join(m.value for m in declared) + "]"
        if self.image_encoder is None:
            raise ValueError(
                f"modality {names} needs an image encoder, and none is named; allowed image_encoder: "
                f"{', '.join(e.value for e in ImageEncoder)} (image-only: image queries find similar images). "
                f"No cross-modal (CLIP-style) encoder is available: no registry package ships one ({MULTIMODAL_DOCS})")
        maps = ENCODER_MODALITIES[self.image_encoder]
        if not set(declared) <= maps:
            raise ValueError(
                f"modality {names} needs one encoder that maps text and images into one space (CLIP-style); "
                f"image_encoder {self.image_encoder.value!r} maps {', '.join(sorted(maps))} only, and no "
                f"cross-modal encoder ships with this gateway ({MULTIMODAL_DOCS} lists what was checked); "
                "declare modality: [image] for image-only search")
        if self.kind is not CollectionKind.DOCUMENTS or self.retriever is not None:
            raise ValueError("an image collection is kind: documents without a custom retriever")
        if not self.content_keys.is_default:
            raise ValueError("content_keys choose the text that is embedded and indexed, and an image collection "
                             "embeds its images; remove content_keys, or use a text collection")
        # An image has no words: BM25 over it would rank file names. Dense is the only mode.
        if "mode" in self.model_fields_set and self.mode is not Mode.DENSE:
            raise ValueError(f"mode {self.mode.value!r} needs words to match; an image collection "
                             "searches mode 'dense' only")
        object.__setattr__(self, "mode", Mode.DENSE)
        return self

    @model_validator(mode="after")
    def _memory(self) -> CollectionConfig:
        if self.kind is CollectionKind.DOCUMENTS:
            if self.memory is not None:
                raise ValueError("`memory` settings need kind: memory; this collection is kind: documents")
            return self
        if not self.content_keys.is_default:
            raise ValueError("content_keys need kind: documents; a memory is embedded and indexed as its own text")
        if self.memory is None:
            object.__setattr__(self, "memory", MemoryConfig())
        # Memories are filtered by user and type: those keys are always declared.
        object.__setattr__(self, "metadata_fields",
                           tuple(dict.fromkeys((*self.metadata_fields, *MEMORY_FIELDS))))
        return self

    @property
    def default_filter(self) -> FilterNode | None:
        """`search.filter` as a filter, or None; checked when the file was read."""
        return filter_from_json(self.search.filter) if self.search.filter is not None else None

    @model_validator(mode="after")
    def _default_filter(self) -> CollectionConfig:
        if self.search.filter is not None:
            try:
                compile_filter(filter_from_json(self.search.filter), self.metadata_fields)
            except InvalidFilter as exc:
                raise ValueError(f"search.filter: {exc.message}") from None
        return self


class NamespaceConfig(_Strict):
    description: str = ""
    collections: dict[Name, CollectionConfig]

    @model_validator(mode="after")
    def _not_empty(self) -> NamespaceConfig:
        if not self.collections:
            raise ValueError("a namespace needs at least one collection")
        return self


FEDERATED = "federated"
# Validation context key: TenantConfig leaves its cross-section problems to the caller, who reads
# them from `cross_problems()` with their keys (gateway/tenancy/loader.py).
CROSS_PROBLEMS_COLLECTED = "cross_problems_collected"


class KeywordRouterConfig(_Strict):
    """Whole-word (or whole-phrase) matches; the first route in file order that matches wins."""

    routes: dict[str, tuple[str, ...]]
    case_sensitive: bool = False

    @model_validator(mode="after")
    def _words(self) -> KeywordRouterConfig:
        for route, words in self.routes.items():
            if not words or any(not w.strip() for w in words):
                raise ValueError(f"route {route!r} needs at least one non-empty word or phrase")
        return self


class MetadataRouterConfig(_Strict):
    """Routes on `search(input: {metadata: {<key>: value}})`; `map` turns values into routes (else the value is the route)."""

    key: str
    map: dict[str, str] | None = None


class CallbackRouterConfig(_Strict):
    """A Python entry point `module:function(query: str, metadata: dict) -> str | None`."""

    function: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]


class RouterRule(_Strict):
    keyword: KeywordRouterConfig | None = None
    metadata: MetadataRouterConfig | None = None
    callback: CallbackRouterConfig | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> RouterRule:
        kinds = [k for k in ("keyword", "metadata", "callback") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"a router rule is exactly one of keyword, metadata, callback; got {kinds or 'none'}")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("keyword", "metadata", "callback") if getattr(self, k) is not None)


class RouterConfig(_Strict):
    """Routers tried in order; the first that returns a route wins, else `default`.

    A route is a collection name, `namespace/collection`, or `federated` (every collection).
    """

    rules: tuple[RouterRule, ...] = ()
    default: str | None = None


class FederationConfig(_Strict):
    """How results from several collections are merged.

    `signals` (the default) ranks like one collection holding every document, and calibrates
    collections whose mode or fusion settings differ; `rrf`/`dbsf` fuse each collection's final
    list and suit unrelated collections (docs/benchmarks.md has the comparison).
    """

    merge: Literal["rrf", "dbsf", "signals"] = "signals"
    # `signals` only: each merged signal list is cut to this depth (default: no cut, i.e. every
    # candidate the collections returned, which for N shards of c is one collection's N * c).
    candidates: int | None = Field(default=None, ge=1, le=2000)
    timeout_ms: int = Field(default=5000, ge=1)
    limit: int = Field(default=10, ge=1, le=1000)
    rrf_k: int = Field(default=60, ge=1)
    # The pipeline a federated search runs unless the request names one.
    pipeline: Name | None = None
    # A collection's (`collection` or `namespace/collection`) weight in the merge: each of its hits' merged
    # score is multiplied by it; collections not named weigh 1.
    weights: dict[str, Annotated[float, Field(ge=0.0, le=100.0)]] = {}


class CorpusConfig(_Strict):
    """A demo or seed corpus ingested on first start when the store is empty."""

    namespace: Name
    collection: Name
    paths: tuple[str, ...]


class LimitsConfig(_Strict):
    """Per-tenant overrides of the admission settings (GATEWAY_TENANT_*, GATEWAY_DEADLINE_MS)."""

    max_concurrent: int | None = Field(default=None, ge=1)
    queue_size: int | None = Field(default=None, ge=0)
    queue_timeout_ms: int | None = Field(default=None, ge=0)
    rate: float | None = Field(default=None, gt=0)
    burst: int | None = Field(default=None, ge=1)
    max_cost: int | None = Field(default=None, ge=1)
    cost_rate: float | None = Field(default=None, gt=0)
    cost_burst: int | None = Field(default=None, ge=1)
    deadline_ms: int | None = Field(default=None, ge=1)
    max_running: int | None = Field(default=None, ge=1)
    max_inflight_cost: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _burst_holds_a_request(self) -> LimitsConfig:
        # Checked against the settings' defaults again at start-up, when both are known.
        if self.max_cost is not None and self.cost_burst is not None and self.cost_burst < self.max_cost:
            raise ValueError(f"cost_burst {self.cost_burst} is below max_cost {self.max_cost}: a request at the "
                             "ceiling could never be admitted")
        return self


class WebhookConfig(_Strict):
    """Lifecycle events POSTed as JSON, signed with HMAC-SHA256 when a secret is set (docs/agents.md)."""

    url: Annotated[str, StringConstraints(pattern=r"^https?://")]
    # The signing secret is read from this environment variable at start-up, never written here.
    secret_env: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    timeout_ms: int = Field(default=2000, ge=1, le=60_000)
    retries: int = Field(default=3, ge=0, le=10)
    # The first retry waits this long, each later one twice as long as the one before.
    backoff_ms: int = Field(default=200, ge=1, le=60_000)


class HooksConfig(_Strict):
    """Who hears this tenant's retrieval lifecycle events; they are queued, never awaited by a search."""

    subscribers: tuple[EntryPoint, ...] = ()
    webhook: WebhookConfig | None = None
    # Events carry no query text unless the tenant opts in.
    include_query: bool = Field(default=False, validation_alias=AliasChoices("include_query", "includeQuery"))
    # Events waiting for delivery; when full, new events are dropped and counted.
    queue_size: int = Field(default=1000, ge=1, le=100_000)

    @property
    def enabled(self) -> bool:
        return bool(self.subscribers) or self.webhook is not None


class ConversationConfig(_Strict):
    """Conversation memory and follow-up resolution (docs/conversations.md)."""

    # Turns kept per conversation: an append deletes the oldest beyond this.
    max_turns: int = Field(default=20, ge=1, le=200)
    # A turn expires this long after it was recorded; expired turns are never read.
    ttl_hours: float = Field(default=168.0, gt=0, le=8760)
    # Hit ids stored per turn (the sources a follow-up boosts come from these).
    max_hits: int = Field(default=10, ge=1, le=100)
    # rules: pronouns and very short queries; llm: the tenant's `llm` rewrites; off: record only.
    resolve: Literal["rules", "llm", "off"] = "rules"
    # A query of at most this many content words (stop words removed) counts as a follow-up.
    short_query_words: int = Field(default=2, ge=0, le=10)
    # Judge turns without a cue (no anaphoric word, more content words than short_query_words) by the
    # cross-encoder too: better follow-ups, about 200-320 ms more on such a turn (docs/conversations.md).
    # false: such a turn is searched as it is, as before.
    judge_without_cue: bool = True
    # Score multiplier of hits from the previous turn's sources: score * (1 + boost). 0 (chosen by
    # cross-validation, docs/conversations.md): a follow-up returns exactly what its glued query finds.
    boost: float = Field(default=0.0, ge=0.0, le=10.0)
    # Sources of the previous turn's top hits that a follow-up boosts.
    boost_sources: int = Field(default=3, ge=1, le=20)


class OperationsConfig(_Strict):
    """Which GraphQL documents the tenant accepts (docs/http.md, persisted queries).

    `manifest` is a JSON file, relative to the tenants directory: `{sha256: document}` as GraphQL
    Code Generator's persisted documents, or Apollo's persisted-query manifest. Its documents
    always resolve by hash; with `allow_only_listed` they are the only ones accepted.
    """

    manifest: str | None = None
    allow_only_listed: bool = False

    @model_validator(mode="after")
    def _needs_manifest(self) -> OperationsConfig:
        if self.allow_only_listed and self.manifest is None:
            raise ValueError("allow_only_listed needs a 'manifest' (a JSON file of the allowed operations, "
                             "relative to the tenants directory)")
        return self


class TenantConfig(_Strict):
    id: Name
    description: str = ""
    # An inactive tenant keeps its config and data; its keys are refused until it is active again.
    active: bool = True
    api_keys: tuple[ApiKeyConfig, ...] = ()
    namespaces: dict[Name, NamespaceConfig]
    seed: tuple[CorpusConfig, ...] = ()
    router: RouterConfig = RouterConfig()
    federation: FederationConfig = FederationConfig()
    llm: LlmConfig | None = None
    pipelines: dict[Name, PipelineConfig] = {}
    kind: Literal["tenant"] = "tenant"
    limits: LimitsConfig = LimitsConfig()
    conversations: ConversationConfig = ConversationConfig()
    # collection (default): own Milvus collections; partition_key: shared ones, Milvus server only.
    isolation: Isolation = Isolation.COLLECTION
    hooks: HooksConfig = HooksConfig()
    operations: OperationsConfig = OperationsConfig()

    def route_target(self, route: str) -> tuple[str, str] | None:
        """(namespace, collection) named by a route, or None when it names none or several."""
        if "/" in route:
            namespace, _, collection = route.partition("/")
            ns = self.namespaces.get(namespace)
            return (namespace, collection) if ns is not None and collection in ns.collections else None
        found = [(n, route) for n, ns in self.namespaces.items() if route in ns.collections]
        return found[0] if len(found) == 1 else None

    @property
    def late_interaction_tokens(self) -> int | None:
        """Document tokens that the tenant's lateInteraction rerankers read (so ingest precomputes
        token vectors at that length), or None when no pipeline uses one."""
        limits = self._document_token_limits()
        return max(limits) if limits else None

    def _document_token_limits(self) -> set[int]:
        return {r.params.document_tokens for pipeline in self.pipelines.values() for stage in pipeline.stages
                if stage.kind == "rerank" for r in stage.params.chain if r.kind == "lateInteraction"}

    def federation_weights(self) -> dict[tuple[str, str], float]:
        """`federation.weights` by (namespace, collection); validated, so every name resolves."""
        return {target: weight for route, weight in self.federation.weights.items()
                if (target := self.route_target(route)) is not None}

    def route_names(self) -> list[str]:
        return [FEDERATED] + [f"{n}/{c}" for n, ns in self.namespaces.items() for c in ns.collections]

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> TenantConfig:
        # A loader collects these one by one with their keys (check_tenant passes the context, so a
        # file's every problem is reported in one run); any other construction refuses with all of them.
        if not (info.context or {}).get(CROSS_PROBLEMS_COLLECTED):
            problems = self.cross_problems()
            if problems:
                raise ValueError("; ".join(message for _, message in problems))
        return self

    def cross_problems(self) -> list[tuple[str, str]]:
        """(key, message) for every reference between sections that does not hold: routes, pipelines,
        tool prefixes, the language model that stages and follow-ups need, seed targets."""
        return [*self._route_problems(), *self._pipeline_problems(), *self._tool_prefix_problems(),
                *self._conversation_problems(), *self._seed_problems()]

    def _route_problems(self) -> list[tuple[str, str]]:
        found = []

        def check(route: str, key: str, where: str) -> None:
            if route != FEDERATED and self.route_target(route) is None:
                found.append((key, f"{where} names route {route!r}, which is not a collection of tenant "
                                   f"{self.id!r} (or is ambiguous); allowed: {', '.join(self.route_names())}"))
        for route in self.federation.weights:
            if route == FEDERATED or self.route_target(route) is None:
                found.append(("federation.weights", f"federation.weights names {route!r}, which is not a collection "
                                                    f"of tenant {self.id!r} (or is ambiguous); allowed: "
                                                    f"{', '.join(self.route_names()[1:])}"))
        for index, rule in enumerate(self.router.rules):
            if rule.keyword is not None:
                for route in rule.keyword.routes:
                    check(route, f"router.rules.{index}.keyword.routes", f"router.rules[{index}].keyword")
            if rule.metadata is not None and rule.metadata.map is not None:
                for route in rule.metadata.map.values():
                    check(route, f"router.rules.{index}.metadata.map", f"router.rules[{index}].metadata.map")
        if self.router.default is not None:
            check(self.router.default, "router.default", "router.default")
        return found

    def _pipeline_problems(self) -> list[tuple[str, str]]:
        found = []
        named = [(f"namespaces.{n}.collections.{c}.pipeline", cfg.pipeline)
                 for n, ns in self.namespaces.items() for c, cfg in ns.collections.items()]
        named.append(("federation.pipeline", self.federation.pipeline))
        for where, name in named:
            if name is not None and name not in self.pipelines:
                found.append((where, f"{where} names pipeline {name!r}, which tenant {self.id!r} does not define; "
                                     f"pipelines: {', '.join(sorted(self.pipelines)) or 'none'}"))
        limits = self._document_token_limits()
        if len(limits) > 1:
            found.append(("pipelines", f"lateInteraction rerankers of tenant {self.id!r} use documentTokens "
                                       f"{sorted(limits)}; the stored token vectors have one length, so use one value"))
        if self.llm is None:
            for name, pipeline in self.pipelines.items():
                for index, stage in enumerate(pipeline.stages):
                    if stage.needs_llm:
                        found.append((f"pipelines.{name}.stages.{index}",
                                      f"pipelines.{name}.stages[{index}] ({stage.kind}) needs a language "
                                      f"model, and tenant {self.id!r} has no `llm` section "
                                      f"(base_url, model, api_key_env, timeout_ms)"))
        return found

    def _tool_prefix_problems(self) -> list[tuple[str, str]]:
        found = []
        seen: dict[str, str] = {}
        for n, ns in self.namespaces.items():
            for c, cfg in ns.collections.items():
                if cfg.tool_prefix is None:
                    continue
                key = f"namespaces.{n}.collections.{c}.tool_prefix"
                if cfg.tool_prefix in seen:
                    found.append((key, f"{key} {cfg.tool_prefix!r} is already used by {seen[cfg.tool_prefix]}; "
                                       "each collection needs its own prefix"))
                else:
                    seen[cfg.tool_prefix] = f"{n}/{c}"
        return found

    def _conversation_problems(self) -> list[tuple[str, str]]:
        if self.conversations.resolve == "llm" and self.llm is None:
            return [("conversations.resolve",
                     f"conversations.resolve: llm needs a language model, and tenant {self.id!r} has no "
                     "`llm` section (base_url, model, api_key_env, timeout_ms); or use resolve: rules")]
        return []

    def _seed_problems(self) -> list[tuple[str, str]]:
        found = []
        for index, corpus in enumerate(self.seed):
            ns = self.namespaces.get(corpus.namespace)
            if ns is None or corpus.collection not in ns.collections:
                found.append((f"seed.{index}", f"seed corpus targets {corpus.namespace}/{corpus.collection}, "
                                               f"which is not a collection of tenant {self.id!r}"))
            elif ns.collections[corpus.collection].retriever is not None:
                found.append((f"seed.{index}",
                              f"seed corpus targets {corpus.namespace}/{corpus.collection}, which is served "
                              f"by the custom retriever {ns.collections[corpus.collection].retriever!r} and "
                              f"never reads Milvus; seed a collection without `retriever`"))
        return found


# -- what a key path may hold, for error messages (gateway/tenancy/loader.py) ---------------------

def _unwrap(annotation: Any) -> Any:
    """The model or enum inside Optional/Annotated/dict/tuple, one container level at a time."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return _unwrap(inner[0]) if len(inner) == 1 else annotation
    return annotation


def _keys_of(model: type[BaseModel]) -> list[str]:
    """The keys a tenant file may write for `model` (aliases as written, else field names)."""
    keys = []
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            keys.append(str(alias.choices[0]))
        else:
            keys.append(info.alias or name)
    return sorted(keys)


def _field(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        names = {name, info.alias} | (set(map(str, alias.choices)) if isinstance(alias, AliasChoices) else set())
        if key in names:
            return info.annotation
    return None


def _resolve(loc: Sequence[str | int]) -> Any:
    """The annotation a location in a tenant file is validated against, or None when unknown."""
    current: Any = TenantConfig
    parts = list(loc)
    while parts:
        current = _unwrap(current)
        origin = get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            current = _field(current, str(parts.pop(0)))
            if current is None:
                return None
        elif origin in (dict, Mapping):
            parts.pop(0)
            current = get_args(current)[1]
        elif origin in (tuple, list):
            parts.pop(0)
            current = get_args(current)[0]
        else:
            return None
    return _unwrap(current)


def allowed_keys(loc: Sequence[str | int]) -> list[str] | None:
    """The keys allowed in the mapping at `loc` (the location of that mapping), or None."""
    target = _resolve(loc)
    if isinstance(target, type) and issubclass(target, BaseModel):
        return _keys_of(target)
    return None


def allowed_values(loc: Sequence[str | int]) -> list[str] | None:
    """The values of the closed set (StrEnum or Literal) a key at `loc` takes, or None."""
    target = _resolve(loc)
    if isinstance(target, type) and issubclass(target, StrEnum):
        return [member.value for member in target]
    if get_origin(target) is Literal:
        return [str(v) for v in get_args(target)]
    return None


def nearest(word: str, candidates: Sequence[str]) -> str | None:
    """The closest candidate to a typo (difflib's ratio, at least 0.6), or None."""
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None
