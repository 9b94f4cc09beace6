"""The cost model: what a request will make the gateway do, in units, estimated before it runs.

One unit is about one candidate row fetched and scored by one signal in one collection (a
quarter of a millisecond of one core on the reference machine, see docs/benchmarks.md). A
search costs

    retrieval  = targets x queries x signals x depth
    filtering  = targets x queries x signals x filter_values
    stages     = the pipeline's hit stages over `depth` hits (weights below)
    payload    = limit x (content + parent characters asked for) / 1000
    facets     = targets x signals x facet depth            (when facets are asked for)
    highlights = hits highlighted x MAX_SENTENCES x HIGHLIGHT_SENTENCE   (when selected)
    total      = 1 + retrieval + filtering + stages + payload + facets + highlights

where `targets` is the collections searched (every visible collection when the request does
not name them: routing may federate), `queries` the planned queries (query stages add to it),
`signals` 2 for hybrid and 1 otherwise, and `depth` the candidates fetched per signal (at least
the collection's `candidates`, the limit and the deepest hit stage). docs/operations.md has
worked examples.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.retrieval.highlights import MAX_SENTENCES
from gateway.retrieval.options import Mode
from gateway.tenancy.config import TenantConfig
from gateway.tenancy.pipelines import PipelineConfig, StageConfig

# A language-model call costs as much as fetching this many rows (seconds, not milliseconds).
LLM_CALL = 500
# Late interaction: MaxSim over ~30 query x ~200 document token vectors per hit, and token
# vectors computed for any chunk stored without them.
LATE_INTERACTION_PER_HIT = 20
# Cross-encoder: a 12-layer forward pass over query + passage, about 75 ms of one core per hit at
# 256 tokens (docs/benchmarks.md, "Cost per request"); counted in proportion to its maxTokens.
CROSS_ENCODER_PER_HIT_256 = 300
# Other per-hit stage work, relative to one retrieved row.
PER_HIT = {"parentExpand": 2, "compress": 2, "decay": 1, "abstain": 1, "custom": 5}
# MMR compares each candidate with every pick: picks^2 x candidates shingle-set comparisons.
MMR_DIVISOR = 400
# Highlights: embedding one sentence of at most 300 characters with the bundled MiniLM took 17 ms of
# CPU on the reference machine (8 such sentences, 135-145 ms); a hit embeds at most MAX_SENTENCES
# of them, and only when no query term marks it, so this is an upper bound. Term spans cost ~nothing.
HIGHLIGHT_SENTENCE = 64
# Search shapes whose cost a tenant's model keeps (a few bytes each); past it, it starts afresh.
MAX_SHAPES = 256


@dataclass(frozen=True, slots=True)
class PipelineCost:
    """What a pipeline adds: planned queries, the depth its hit stages need, and their work."""

    queries: int
    depth: int
    units: int


def pipeline_cost(pipeline: PipelineConfig | None, limit: int) -> PipelineCost:
    if pipeline is None:
        return PipelineCost(1, limit, 0)
    queries, units = 1, 0
    depth = limit
    for stage in pipeline.stages:
        depth = max(depth, _stage_depth(stage, limit))
    for stage in pipeline.stages:
        queries += _extra_queries(stage)
        units += _stage_units(stage, depth, limit)
    return PipelineCost(queries, depth, units)


def _extra_queries(stage: StageConfig) -> int:
    params = stage.params
    return {"queryPlanner": getattr(params, "max_queries", 0), "multiQuery": getattr(params, "count", 0),
            # customQuery returns at most max_queries in all, the question's own among them.
            "customQuery": getattr(params, "max_queries", 1) - 1, "hyde": 1}.get(stage.kind, 0)


def _stage_depth(stage: StageConfig, limit: int) -> int:
    if stage.kind == "rerank":
        return max(r.params.top_k for r in stage.params.chain)
    if stage.kind == "diversify":
        return 3 * (stage.params.limit or 10)  # as Diversify.depth: three candidates per pick
    return limit


def _stage_units(stage: StageConfig, depth: int, limit: int) -> int:
    if stage.kind == "customQuery":
        return 1  # one call of the tenant's function, before any hit exists; its queries are paid as retrieval
    if stage.needs_llm:
        # compress (llm) asks the model once per hit it would cut.
        return LLM_CALL * (depth if stage.kind == "compress" else 1)
    if stage.kind == "rerank":
        units = 0
        for reranker in stage.params.chain:
            top = min(reranker.params.top_k, depth)
            if reranker.kind == "crossEncoder":
                units += CROSS_ENCODER_PER_HIT_256 * top * reranker.params.max_tokens // 256
                continue
            if reranker.kind == "colbert":
                # The same 12-layer, 384-wide encoder over each passage, so the same cost per token.
                units += CROSS_ENCODER_PER_HIT_256 * top * reranker.params.document_tokens // 256
                continue
            units += {"lateInteraction": LATE_INTERACTION_PER_HIT * top, "http": LLM_CALL}.get(reranker.kind, top)
        return units
    if stage.kind == "diversify":
        picks = stage.params.limit or limit
        return picks * picks * depth // MMR_DIVISOR
    return PER_HIT.get(stage.kind, 1) * depth


@dataclass(frozen=True, slots=True)
class SearchShape:
    """What the cost of one `search` / `context` field depends on (from the request, before running)."""

    limit: int | None = None
    collections: int | None = None      # named explicitly; None: the tenant's routing decides
    named_collection: bool = False
    pipeline: str | None = None
    mode: Mode | None = None
    filter_values: int = 0              # conditions plus list values
    content: bool = True                # hit content asked for
    parent: bool = False                # hit parents asked for
    facet_depth: int = 0                # hits a facet pass counts (0: no facets)
    highlighted: int = 0                # hits whose highlights are asked for


class TenantCostModel:
    """The cost model with one tenant's collections and pipelines filled in."""

    def __init__(self, tenant: TenantConfig) -> None:
        self._tenant = tenant
        self.tenant_id = tenant.id
        collections = [c for ns in tenant.namespaces.values() for c in ns.collections.values()]
        self._collections = len(collections)
        self._default_limit = max([tenant.federation.limit, *(c.limit for c in collections)])
        self._candidates = max(c.candidates for c in collections)
        self._hybrid = any(c.mode is Mode.HYBRID for c in collections)
        self._parent_chars = max(c.chunking.parent_chars for c in collections)
        self._content_chars = max(c.chunking.child_chars for c in collections)
        # Without `pipeline:` the target's default pipeline runs; assume the heaviest.
        self._default_pipelines = [tenant.pipelines[name] for name in
                                   {c.pipeline for c in collections} | {tenant.federation.pipeline}
                                   if name is not None and name in tenant.pipelines]
        # Costs of the shapes seen (a client sends the same few), a function of the shape and this config.
        self._searches: dict[SearchShape, int] = {}

    def search(self, shape: SearchShape) -> int:
        """The cost of one search; `highlighted` is held to the hits it can return."""
        cost = self._searches.get(shape)
        if cost is None:
            if len(self._searches) >= MAX_SHAPES:
                self._searches.clear()
            cost = self._searches[shape] = self._search(shape)
        return cost

    def _search(self, shape: SearchShape) -> int:
        limit = shape.limit if shape.limit is not None and shape.limit > 0 else self._default_limit
        if shape.collections is not None:
            targets = max(1, shape.collections)
        else:
            targets = 1 if shape.named_collection else self._collections
        signals = 2 if (shape.mode is Mode.HYBRID or (shape.mode is None and self._hybrid)) else 1
        if shape.pipeline is not None:
            candidates = [self._tenant.pipelines.get(shape.pipeline)]
        else:
            candidates = self._default_pipelines or [None]
        costs = [pipeline_cost(p, limit) for p in candidates]
        plan = max(costs, key=lambda c: c.units + c.queries * c.depth)
        depth = max(self._candidates, limit, plan.depth)
        fanout = targets * plan.queries * signals
        payload = limit * ((self._content_chars if shape.content else 0)
                           + (self._parent_chars if shape.parent else 0)) // 1000
        facets = targets * signals * shape.facet_depth
        highlights = min(shape.highlighted, limit) * MAX_SENTENCES * HIGHLIGHT_SENTENCE
        return 1 + fanout * depth + fanout * shape.filter_values + plan.units + payload + facets + highlights

    def collections(self) -> int:
        return 1 + self._collections

    def source(self) -> int:
        return 10

    def citations(self, support_checks: int, stored_sources: int) -> int:
        """validateCitations: one cross-encoder pair at 256 tokens per support check, one source read per
        stored source; parsing and quote checks are linear and cheap."""
        return 1 + support_checks * CROSS_ENCODER_PER_HIT_256 + stored_sources * self.source()

    def upsert(self, documents: int, text_chars: int) -> int:
        """Chunking, embedding and writing: about one unit per 100 characters, ten per document."""
        return 10 * documents + text_chars // 100

    def delete(self) -> int:
        return 10


def filter_values(node: object) -> int:
    """Conditions plus list values in a filter input, counted without recursion (nesting is unbounded here)."""
    count = 0
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if "field" in item or "op" in item:
                value = item.get("value")
                count += 1 + (len(value) if isinstance(value, list) else 0)
            for key in ("and", "or", "not"):
                if item.get(key) is not None:
                    stack.append(item[key])
    return count
