"""The search service: resolve the tenant's target collection(s), retrieve, trace."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from opentelemetry import trace as otel

from gateway.admission.deadline import step_done
from gateway.admission.scheduler import fan_out, offload
from gateway.conversations.memory import owned, retriever_for
from gateway.conversations.followup import DEFAULT_RULES, Rules
from gateway.conversations.service import Conversations
from gateway.embedding.base import Embedder
from gateway.embedding.modal import collection_embedder
from gateway.hooks.delivery import Hooks
from gateway.errors import (InvalidInput, LimitExceeded, ModeNotSupported, UnknownCollection, UnknownPipeline,
                            UnknownSource, allowed)
from gateway.retrieval.defaults import options_for
from gateway.retrieval.facets import DEFAULT_FACET_DEPTH, FacetCounts, FacetSpec, count_facets, facet_stored_fields
from gateway.retrieval.highlights import Highlights, highlight
from gateway.retrieval.properties import check_declared
from gateway.retrieval.sorting import sort_stored_fields
from gateway.retrieval.hit import Hit
from gateway.retrieval.options import Fusion, Mode, Query, ignored_parameters
from gateway.retrieval.pipeline import Pipeline, PlannedQuery, StageRequest, merge_queries
from gateway.embedding.models import ModelSource
from gateway.retrieval.stages import StageServices, build_pipelines
from gateway.tenancy.derived import PerTenant
from gateway.retrieval.custom import CustomRetriever, load_retriever
from gateway.retrieval.retrievers import CollectionRetriever
from gateway.retrieval.shaping import Group, Shaping, shape
from gateway.retrieval.trace import Phase, StageHandle, StageTrace, Trace, TraceRecorder
from gateway.routing.federated import CollectionFailure, FederatedRetriever, Member
from gateway.routing.graph import EdgeSearch, inferred_edges
from gateway.routing.routers import RouterChain
from gateway.settings import Settings
from gateway.storage.analyzer import analyzer_for
from gateway.storage.edges import Direction
from gateway.storage.filters import And, Condition, FilterNode, Op, compile_filter
from gateway.storage.identifiers import check_source_id
from gateway.storage.milvus import MilvusStore, StoredChunk
from gateway.storage.residency import loads_recorded
from gateway.storage.token_vectors import TokenVectorStore
from gateway.tenancy.auth import Principal
from gateway.tenancy.config import FEDERATED, CollectionKind
from gateway.tenancy.registry import CollectionRef, TenantRegistry


# Hit stages that never read the query's text: the only ones a search by vector alone can run.
TEXT_FREE_STAGES = frozenset({"abstain", "decay", "diversify", "parentExpand"})

# Called with a pipeline search's first-pass hits, before its stages run (see Searcher.search).
Preview = Callable[[list[Hit]], None]


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str
    namespace: str | None = None
    collection: str | None = None
    mode: Mode | None = None
    limit: int | None = None
    threshold: float | None = None
    filter: FilterNode | None = None
    fusion: Fusion | None = None
    alpha: float | None = None
    collections: tuple[str, ...] | None = None
    namespaces: tuple[str, ...] | None = None
    federated: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)
    pipeline: str | None = None
    # Stored chunk fields the caller reads (SearchOptions.fields); None: all. Ignored under a
    # pipeline, whose stages may read any field.
    fields: frozenset[str] | None = None
    # Record this search as a turn of the conversation, and resolve follow-ups against it.
    conversation_id: str | None = None
    # Autocut and grouping, applied to the final ranked hits (retrieval/shaping.py).
    shaping: Shaping = Shaping()
    # A decoded query image (embedding.images.open_image): the search is then by this image, in
    # each collection whose encoder maps images; `query` still routes and labels it.
    image: Any = None
    # The client's own query vector (float32, checked finite): used instead of embedding `query`;
    # `query` may then be empty, and the search is dense only.
    vector: Any = None
    # Count the first `facet_depth` matches of the same retrieval by these properties (retrieval/facets.py).
    facets: tuple[FacetSpec, ...] = ()
    facet_depth: int = DEFAULT_FACET_DEPTH


@dataclass(frozen=True, slots=True)
class SearchResult:
    hits: tuple[Hit, ...]
    trace: Trace
    failures: tuple[CollectionFailure, ...] = ()
    # Set when the request grouped its hits (then `hits` is the groups' hits, in group order).
    groups: tuple[Group, ...] | None = None
    # An `abstain` stage judged the evidence too weak and returned no hits (trace.warnings says why).
    abstained: bool = False
    # Set when the request asked for facets.
    facets: FacetCounts | None = None
    # The text searched: the query, or a follow-up's resolution (what highlights match).
    searched: str = ""


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """Which collections answer, and why."""

    router: str
    route: str
    matched: str | None
    targets: tuple[CollectionRef, ...]
    considered: tuple[str, ...]
    federated: bool


@dataclass(frozen=True, slots=True)
class SourceResult:
    ref: CollectionRef
    chunks: tuple[StoredChunk, ...]


class Searcher:
    """Everything a reader can do; the tenant always comes from the principal."""

    def __init__(self, registry: TenantRegistry, store: MilvusStore, embedder: Embedder | None,
                 settings: Settings, tracer: otel.Tracer | None = None, *,
                 tokens: TokenVectorStore | None = None, environ: Mapping[str, str] | None = None,
                 conversation_rules: Rules = DEFAULT_RULES) -> None:
        self._tracer = tracer or otel.get_tracer("gateway")
        self._registry = registry
        self._store = store
        self._embedder = embedder
        self._settings = settings
        # What each tenant's config makes (routers, custom retrievers, pipelines) is built on its first
        # use and kept for the most recently used tenants (gateway/tenancy/derived.py). Every tenant's
        # is built once now, so that a callback router, custom retriever or stage that does not
        # import, or an LLM key that is missing, stops start-up rather than a first query.
        self._tokens = tokens or TokenVectorStore(store)
        services = StageServices(store, embedder, self._tokens, environ if environ is not None else {},
                                 models=ModelSource(settings.model_dir))
        self._chains = PerTenant(registry.get, RouterChain)
        self._custom = PerTenant(registry.get, lambda tenant: {
            ref.scope: load_retriever(ref.config.retriever, f"tenant {tenant.id!r} collection {ref.label!r} retriever")
            for ref in registry.collections(tenant.id) if ref.config.retriever})
        self._pipelines: PerTenant[dict[str, Pipeline]] = PerTenant(
            registry.get, lambda tenant: build_pipelines(tenant, services))
        for tenant in registry:
            for derived in (self._chains, self._custom, self._pipelines):
                derived.get(tenant.id)
        self._conversations = Conversations(registry, store, environ if environ is not None else {},
                                            max_query_chars=settings.max_query_chars, rules=conversation_rules,
                                            model_source=services.models)

        # Lifecycle hooks last: they start threads, and only when everything else was built.
        self._hooks = Hooks(registry, services.environ)

    @property
    def hooks(self) -> Hooks:
        return self._hooks

    def close(self) -> None:
        """Deliver what the hooks still hold (briefly) and stop their threads."""
        self._hooks.close()

    @property
    def registry(self) -> TenantRegistry:
        return self._registry

    async def inferred_edges(self, principal: Principal, namespace: str, collection: str, source_id: str,
                             direction: Direction = Direction.BOTH, min_similarity: float = 0.0,
                             limit: int = 20) -> EdgeSearch:
        """A source's inferred similarity edges in one of the caller's collections (routing/graph.py)."""
        return await inferred_edges(self._registry, self._store, principal, namespace, collection, source_id,
                                    direction, min_similarity, limit)

    @property
    def max_limit(self) -> int:
        """GATEWAY_MAX_LIMIT: the most hits one search returns, and so the most a cursor pages over."""
        return self._settings.max_limit

    @property
    def conversations(self) -> Conversations:
        return self._conversations

    @property
    def tokens(self) -> TokenVectorStore:
        return self._tokens

    def pipelines(self, tenant: str) -> dict[str, Pipeline]:
        return dict(self._pipelines.get(tenant))

    def validate_query(self, text: str) -> str:
        stripped = text.strip()
        if not stripped:
            raise InvalidInput("query is empty; send at least one word, or a `vector`")
        if len(text) > self._settings.max_query_chars:
            raise LimitExceeded(f"query is {len(text)} characters; at most {self._settings.max_query_chars} are allowed")
        return stripped

    async def search(self, principal: Principal, request: SearchRequest,
                     recorder: TraceRecorder | None = None, preview: Preview | None = None) -> SearchResult:
        """The ranked hits. With a pipeline, `preview` (when given) is called once with the
        first retrieval's top `limit` hits, before any stage reorders them (`searchProgress`)."""
        recorder = recorder or TraceRecorder(self._tracer)
        events = self._hooks.search_events(principal.tenant, request.query)
        if events is None:
            return await self._search(principal, request, recorder, [], preview)
        planned: list[RoutePlan] = []
        asked = request.collections or ((request.collection,) if request.collection else ())
        events.started(request.namespace, asked, request.mode.value if request.mode else None)
        recorder.observer = events
        try:
            result = await self._search(principal, request, recorder, planned, preview)
        except BaseException as exc:
            namespace, labels = _where(planned[0]) if planned else (request.namespace, asked)
            events.failed(exc, namespace, labels)
            raise
        plan = planned[0]
        events.ended(*_where(plan), retriever=self._retriever_kind(plan), mode=_mode(plan, request),
                     counts={"hits": len(result.hits), "stages": len(result.trace.stages),
                             "failedCollections": len(result.failures)})
        return result

    async def _search(self, principal: Principal, request: SearchRequest, recorder: TraceRecorder,
                      planned: list[RoutePlan], preview: Preview | None = None) -> SearchResult:
        vector_only = request.vector is not None and not request.query.strip()
        if vector_only:
            request = self._vector_only(request)
            text = ""
        else:
            text = self.validate_query(request.query)
        turn = None
        if request.conversation_id is not None:
            # A follow-up is routed and searched as resolved ("how much is it?" -> about refunds).
            turn = await self._conversations.begin(principal.tenant, request.conversation_id, text, recorder,
                                                   user_id=principal.user_id)
            text = turn.resolution.searched
        with recorder.stage("route", Phase.ROUTE) as stage:
            plan = self.plan(principal, request, text)
            planned.append(plan)
            pipeline = self._pipeline(principal.tenant, request, plan)
            if vector_only and pipeline is not None:
                _check_textless(pipeline)
            if pipeline is not None:
                request = dataclasses.replace(request, fields=None)
            self._check_properties(request, plan)
            if request.fields is not None and request.shaping.sort:
                request = dataclasses.replace(request, fields=request.fields | sort_stored_fields(request.shaping.sort))
            stage.detail.update({"router": plan.router, "matched": plan.matched, "route": plan.route,
                                 "routes": [t.label for t in plan.targets], "candidates": list(plan.considered),
                                 "pipeline": pipeline.name if pipeline else None})
            stage.output_count = len(plan.targets)
        step_done("route")
        limit = self._limit(principal.tenant, request, plan)
        failures: list[CollectionFailure] = []

        async def one(query: PlannedQuery, depth: int) -> list[Hit]:
            if not plan.federated:
                return await self._single(plan, request, query, depth, recorder, principal.user_id)
            hits, failed = await self._federated(principal, request, query, depth, plan, recorder)
            failures.extend(failed)
            return hits

        async def base(query: PlannedQuery, depth: int) -> list[Hit]:
            nonlocal preview
            hits = await first_pass(query, depth)
            if preview is not None and query.text == text:
                preview, show = None, preview  # once: the caller's own query, before the stages
                show(hits[:limit])
            return hits

        async def first_pass(query: PlannedQuery, depth: int) -> list[Hit]:
            nonlocal turn
            alone = turn.resolution.own_words if turn is not None else None
            if alone is None or query.text != text:
                return await one(query, depth)
            # A follow-up may be a new topic ("Is there nightly backup ...?" after a refunds question):
            # its own words are searched too; a new topic keeps its own hits, and a short follow-up
            # searched alongside has the two rankings fused, so neither reading is lost.
            planned = [query, PlannedQuery(alone, kind="followUp:alone")]
            results = await fan_out(*(one(q, depth) for q in planned))
            signals = await offload(self._conversations.measure, principal.tenant, turn, results[0], results[1],
                                    self._embedder)
            turn, kept = self._conversations.settle(turn, results[0], results[1], recorder, signals)
            if kept is not None:
                return kept
            if turn.resolution.alongside is None:
                return results[0]
            planned[0] = dataclasses.replace(query, weight=query.weight * turn.resolution.searched_weight)
            return merge_queries(list(zip(planned, results)))[:depth]

        with loads_recorded() as loads:
            if pipeline is None:
                hits = await first_pass(PlannedQuery(text), limit)
            else:
                fields = [frozenset(ref.config.metadata_fields) for ref in plan.targets]
                stage_request = StageRequest(text, limit, self._settings.max_query_chars,
                                             frozenset.intersection(*fields) if fields else frozenset(), request.filter,
                                             _held_to(principal, plan.targets),
                                             {(r.scope.namespace, r.scope.collection): r.config.language
                                              for r in plan.targets})
                hits = await pipeline.run(stage_request, base, recorder)
        if loads:
            labels = {self._store.physical(ref.scope).chunks: ref.label for ref in plan.targets}
            for load in loads:
                recorder.warn(f"collection {labels.get(load.collection, load.collection)} was inactive: it was loaded "
                              f"into memory for this request ({load.seconds * 1000:.0f} ms)")
        if turn is not None:
            hits = await self._conversations.finish(principal.tenant, turn, hits, recorder)
        groups = None
        if request.shaping != Shaping():
            with recorder.stage("shape", Phase.HITS, input_count=len(hits)) as stage:
                shaped, groups = shape(hits, request.shaping)
                stage.detail.update({"autocut": request.shaping.autocut,
                                     "sort": [f"{k.field} {k.order.value}" for k in request.shaping.sort],
                                     "groupBy": request.shaping.group_by and request.shaping.group_by.value,
                                     "groups": None if groups is None else len(groups)})
                hits = list(shaped)
                stage.hits(hits)
        facets = await self._facets(principal, request, plan, text, recorder) if request.facets else None
        abstained = any(st.name == "abstain" and st.detail.get("abstained") for st in recorder.stages)
        if not hits:
            recorder.warn(_empty_reason(recorder.stages, request, plan))
        # With several planned queries a collection can fail once per query; report it once.
        return SearchResult(tuple(hits), recorder.finish(), tuple({f.collection: f for f in failures}.values()),
                            groups, abstained, facets, "" if request.image is not None else text)

    @staticmethod
    def _check_properties(request: SearchRequest, plan: RoutePlan) -> None:
        """A sort or facet on metadata.<key> reads only keys every target declares, as a filter may."""
        declared = frozenset.intersection(*(frozenset(ref.config.metadata_fields) for ref in plan.targets))
        check_declared("sort", [k.field for k in request.shaping.sort], declared)
        check_declared("facet", [f.field for f in request.facets], declared)

    async def _facets(self, principal: Principal, request: SearchRequest, plan: RoutePlan, text: str,
                      recorder: TraceRecorder) -> FacetCounts:
        """Count the first `facet_depth` hits of the same first-pass retrieval (no pipeline stages),
        fetching only the fields the facets read. Its own retrieval is traced as one `facets` stage."""
        counting = dataclasses.replace(request, fields=facet_stored_fields(request.facets))
        depth = request.facet_depth
        inner = TraceRecorder(self._tracer)
        with recorder.stage("facets", Phase.RETRIEVE, input_count=len(plan.targets)) as stage:
            if plan.federated:
                hits, failed = await self._federated(principal, counting, PlannedQuery(text), depth, plan, inner)
                for failure in failed:
                    stage.warn(f"facets leave out collection {failure.collection}: {failure.reason}")
            else:
                hits = await self._single(plan, counting, PlannedQuery(text), depth, inner, principal.user_id)
            counts = await offload(count_facets, hits[:depth], request.facets, depth)
            stage.output_count = counts.counted
            stage.detail.update({"depth": depth, "counted": counts.counted, "complete": counts.complete,
                                 "fields": [f.field for f in request.facets]})
        return counts

    async def highlight(self, principal: Principal, searched: str, vector: Any,
                        hits: Sequence[Hit]) -> list[Highlights]:
        """Each hit's highlights for the text searched (retrieval/highlights.py); `vector` is the
        client's query vector, if the search had one (sentences are compared with it)."""
        embedder = self._embedder
        if not hits:
            return []

        def similarity(sentences: list[str]) -> Any:
            assert embedder is not None
            query = vector if vector is not None else embedder.embed_query(searched, principal.tenant)
            return embedder.embed_documents(sentences) @ np.asarray(query, dtype=np.float32) / max(
                float(np.linalg.norm(query)), 1e-12)

        usable = embedder is not None and (vector is not None or bool(searched.strip()))
        # What BM25 indexed each hit's collection with: its language's analysis.
        languages = {(h.namespace, h.collection): self._registry.resolve(
            principal.tenant, h.collection, namespace=h.namespace).config.language for h in hits}

        return await offload(highlight, list(hits), searched,
                             lambda hit: analyzer_for(languages[(hit.namespace, hit.collection)]),
                             similarity if usable else None)

    async def _single(self, plan: RoutePlan, request: SearchRequest, query: PlannedQuery, depth: int,
                      recorder: TraceRecorder, user_id: str | None = None) -> list[Hit]:
        ref = plan.targets[0]
        options = self._options(ref, request, query, depth, user_id)
        with recorder.stage(f"retrieve:{ref.label}", Phase.RETRIEVE, input_count=1) as stage:
            retriever = self._retriever(ref, f"{plan.router}:{plan.route}")
            vector = _client_vector(request, query)
            hits = await retriever.retrieve(Query(query.text, vector, request.image), options)
            mode = retriever.effective_mode(Query(query.text), options)
            stage.detail.update({"mode": mode.value, "fusion": options.fusion.value, "query": query.kind,
                                 "queryModality": _modality(request, vector)})
            if mode is not Mode.SPARSE and ref.config.retriever is None:
                index = self._store.dense_index(ref.scope, max(options.candidates, options.limit), cached=True)
                if index is not None:
                    stage.detail["denseIndex"] = index.describe()
            if defaults := _default_filters(plan.targets):
                stage.detail["defaultFilters"] = defaults
            _notify(recorder, stage, retriever.notices(Query(query.text), options)
                    + ignored_parameters(mode, request.fusion, request.alpha))
            stage.hits(hits)
        return hits

    async def _federated(self, principal: Principal, request: SearchRequest, query: PlannedQuery, depth: int,
                         plan: RoutePlan, recorder: TraceRecorder) -> tuple[list[Hit], tuple[CollectionFailure, ...]]:
        config = self._registry.get(principal.tenant)
        federation = config.federation
        members = [Member(self._retriever(ref, f"{plan.router}:{plan.route}"),
                          self._options(ref, request, query, depth, principal.user_id)) for ref in plan.targets]
        retriever = FederatedRetriever(members, merge=federation.merge, timeout_s=federation.timeout_ms / 1000,
                                       rrf_k=federation.rrf_k, candidates=federation.candidates,
                                       weights=config.federation_weights())
        with recorder.stage("federate", Phase.RETRIEVE, input_count=len(members)) as stage:
            vector = _client_vector(request, query)
            if vector is None and request.image is None and self._embedder is not None and any(
                    m.options.mode is not Mode.SPARSE for m in members if isinstance(m.retriever, CollectionRetriever)):
                # One embedding for every collection, instead of one per collection.
                vector = await offload(self._embedder.embed_query, query.text, principal.tenant)
            outcome = await retriever.retrieve(Query(query.text, vector, request.image), depth)
            notices: dict[str, None] = {}
            for member in members:
                mode = member.retriever.effective_mode(Query(query.text), member.options)
                notices.update(dict.fromkeys(member.retriever.notices(Query(query.text), member.options)
                                             + ignored_parameters(mode, request.fusion, request.alpha)))
            _notify(recorder, stage, tuple(notices))
            stage.detail.update({"merge": federation.merge, "collections": outcome.counts, "query": query.kind,
                                 "failed": {f.collection: f.reason for f in outcome.failures}})
            if federation.weights:
                stage.detail["weights"] = {m.label: retriever.weight_of(m) for m in members}
            if defaults := _default_filters(plan.targets):
                stage.detail["defaultFilters"] = defaults
            for failure in outcome.failures:
                stage.warn(f"collection {failure.collection} left out: {failure.reason}")
                recorder.warn(f"partial result: collection {failure.collection} failed ({failure.reason})")
            stage.hits(outcome.hits)
        return list(outcome.hits), tuple(outcome.failures)

    @staticmethod
    def _vector_only(request: SearchRequest) -> SearchRequest:
        """A search by the client's vector alone: dense, and nothing that reads the query's words."""
        if request.mode is not None and request.mode is not Mode.DENSE:
            raise ModeNotSupported(f"mode {request.mode.value!r} runs BM25 on the query's text, and this search has "
                                   "only a vector; allowed without `query`: dense (or send `query` beside `vector`)")
        if request.conversation_id is not None:
            raise InvalidInput("conversationId records the query's text as a turn, and this search has only a "
                               "vector; send `query` beside `vector`")
        return dataclasses.replace(request, mode=Mode.DENSE)

    def _retriever(self, ref: CollectionRef, route: str) -> CollectionRetriever | CustomRetriever:
        function = self._custom.get(ref.scope.tenant).get(ref.scope)
        if function is not None:
            return CustomRetriever(function, ref.config.retriever or "", ref, route=route)
        return retriever_for(self._store, self._embedder, ref, route=route)  # by the collection's kind

    def _retriever_kind(self, plan: RoutePlan) -> str:
        if plan.federated:
            return "federated"
        ref = plan.targets[0]
        return f"custom:{ref.config.retriever}" if ref.scope in self._custom.get(ref.scope.tenant) else "collection"

    def _limit(self, tenant: str, request: SearchRequest, plan: RoutePlan) -> int:
        """The number of hits the caller gets, checked against the maximum."""
        if plan.federated:
            default = self._registry.get(tenant).federation.limit
            chosen = request.limit if request.limit is not None else default
        else:
            chosen = request.limit if request.limit is not None else plan.targets[0].config.limit
        return options_for(plan.targets[0].config, limit=chosen, max_limit=self._settings.max_limit).limit

    def _pipeline(self, tenant: str, request: SearchRequest, plan: RoutePlan) -> Pipeline | None:
        """The request's pipeline, else the collection's (one target) or the federation's."""
        pipelines = self._pipelines.get(tenant)
        if request.pipeline is not None:
            if request.pipeline not in pipelines:
                raise UnknownPipeline(f"pipeline {request.pipeline!r} is not defined for tenant {tenant!r}; "
                                      f"known: {allowed(pipelines)}")
            return pipelines[request.pipeline]
        name = (self._registry.get(tenant).federation.pipeline if plan.federated
                else plan.targets[0].config.pipeline)
        return pipelines[name] if name is not None else None

    def _options(self, ref: CollectionRef, request: SearchRequest, query: PlannedQuery, depth: int,
                 user_id: str | None = None):
        """Options for one planned query; `depth` is internal, so it is not held to the caller's maximum.

        A key bound to a user (`user_id`) searches a memory collection within that user's memories only.
        """
        where = request.filter
        if query.filter is not None:
            where = query.filter if where is None else And((where, query.filter))
        held = _collection_filter(user_id, ref)
        if held is not None:
            where = held if where is None else And((where, held))
        options = options_for(ref.config, mode=query.mode or request.mode, limit=depth, fusion=request.fusion,
                              alpha=request.alpha, threshold=request.threshold, filter=where)
        return dataclasses.replace(options, fields=request.fields)

    def plan(self, principal: Principal, request: SearchRequest, text: str) -> RoutePlan:
        """Explicit choice first (collections, collection, federated), then the tenant's routers."""
        tenant = principal.tenant
        if request.collections:
            refs = tuple(self._resolve_named(tenant, name, request.namespace) for name in request.collections)
            return RoutePlan("explicit", "collections", None, _unique(refs), (), federated=len(set(refs)) > 1)
        if request.collection is not None:
            ref = self._registry.resolve(tenant, request.collection, namespace=request.namespace)
            return RoutePlan("explicit", ref.label, None, (ref,), (), federated=False)
        visible = self._visible(tenant, request)
        if request.federated:
            return RoutePlan("explicit", FEDERATED, None, visible, (), federated=True)
        allowed_labels = {ref.label for ref in visible}
        decision = self._chains.get(tenant).decide(text, request.metadata, self._routable(tenant, allowed_labels))
        if decision is None:
            if len(visible) == 1:
                return RoutePlan("only-collection", visible[0].label, None, visible, (), federated=False)
            raise UnknownCollection(f"no router matched and tenant {tenant!r} has no default route; name a "
                                    f"collection or set federated: true; collections: "
                                    f"{allowed(r.label for r in visible)}")
        if decision.route == FEDERATED:
            return RoutePlan(decision.router, FEDERATED, decision.matched, visible, decision.considered,
                             federated=len(visible) > 1)
        ref = self._resolve_named(tenant, decision.route, None)
        return RoutePlan(decision.router, ref.label, decision.matched, (ref,), decision.considered, federated=False)

    def _routable(self, tenant: str, labels: set[str]):
        config = self._registry.get(tenant)

        def allowed_route(route: str) -> bool:
            if route == FEDERATED:
                return True
            target = config.route_target(route)
            return target is not None and f"{target[0]}/{target[1]}" in labels

        return allowed_route

    def _visible(self, tenant: str, request: SearchRequest) -> tuple[CollectionRef, ...]:
        names = request.namespaces or ((request.namespace,) if request.namespace else (None,))
        refs: list[CollectionRef] = []
        for namespace in names:
            refs.extend(self._registry.collections(tenant, namespace))
        return _unique(tuple(refs))

    def _resolve_named(self, tenant: str, name: str, namespace: str | None) -> CollectionRef:
        if "/" in name and namespace is None:
            namespace, _, name = name.partition("/")
        return self._registry.resolve(tenant, name, namespace=namespace)

    def collections(self, principal: Principal) -> list[CollectionRef]:
        return self._registry.collections(principal.tenant)

    def dimension(self, ref: CollectionRef) -> int | None:
        """The size of the collection's dense vectors (its encoder's), or None without one."""
        encoder = collection_embedder(ref.config, self._embedder)
        return encoder.dim if encoder is not None else None

    async def chunk_count(self, ref: CollectionRef) -> int:
        exists = await offload(self._store.open_existing, ref.scope)
        return await offload(self._store.count, ref.scope) if exists else 0

    async def source(self, principal: Principal, namespace: str, source_id: str,
                     collection: str | None = None) -> SourceResult:
        """All chunks of one source, in order, for a citation UI."""
        check_source_id(source_id)
        if collection is not None:
            refs = [self._registry.resolve(principal.tenant, collection, namespace=namespace)]
        else:
            refs = self._registry.collections(principal.tenant, namespace)
        for ref in refs:
            if not await offload(self._store.open_existing, ref.scope):
                continue
            chunks = await offload(self._store.source_chunks, ref.scope, source_id)
            if not owned(principal, ref, chunks):
                continue  # another user's memory: to a bound key it does not exist
            if chunks:
                return SourceResult(ref, tuple(chunks))
        raise UnknownSource(f"source {source_id!r} is not in namespace {namespace!r} "
                            f"(searched: {allowed(r.label for r in refs)})")


def _client_vector(request: SearchRequest, query: PlannedQuery) -> Any:
    """The client's query vector for the caller's own query; a query a pipeline stage wrote (a
    paraphrase, a hypothetical answer) is other words, embedded by the gateway."""
    return request.vector if query.kind == "original" else None


def _modality(request: SearchRequest, vector: Any) -> str:
    return "image" if request.image is not None else "vector" if vector is not None else "text"


def _check_textless(pipeline: Pipeline) -> None:
    """A pipeline may run after a search by vector alone when none of its stages reads the query's text."""
    reading = [s.name for s in (*pipeline.query_stages, *pipeline.hit_stages) if s.name not in TEXT_FREE_STAGES]
    if reading:
        raise InvalidInput(f"pipeline {pipeline.name!r} has stages that read the query's text "
                           f"({', '.join(reading)}), and this search has only a vector; send `query` beside "
                           f"`vector`, or choose a pipeline whose stages are among: {allowed(TEXT_FREE_STAGES)}")


def _own_memories(user_id: str | None, ref: CollectionRef) -> FilterNode | None:
    """The filter a key bound to a user is held to in a memory collection (None: no filter)."""
    if user_id is None or ref.config.kind is not CollectionKind.MEMORY:
        return None
    return Condition("metadata.user_id", Op.EQ, user_id)


def _collection_filter(user_id: str | None, ref: CollectionRef) -> FilterNode | None:
    """What every search of `ref` is held to: the collection's `search.filter` and, for a key bound to a
    user, that user's memories (None: nothing)."""
    parts = [node for node in (ref.config.default_filter, _own_memories(user_id, ref)) if node is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def _default_filters(refs: Sequence[CollectionRef]) -> dict[str, str]:
    """Each target's `search.filter` as the expression it compiles to, for the trace."""
    return {ref.label: compile_filter(node, ref.config.metadata_fields)
            for ref in refs if (node := ref.config.default_filter) is not None}


def _held_to(principal: Principal, refs: Sequence[CollectionRef]) -> dict[tuple[str, str], FilterNode]:
    held = {(ref.scope.namespace, ref.scope.collection): _collection_filter(principal.user_id, ref) for ref in refs}
    return {scope: node for scope, node in held.items() if node is not None}


def _empty_reason(stages: tuple[StageTrace, ...], request: SearchRequest, plan: RoutePlan) -> str:
    """Why a search returned no hits: the stage that removed the last of them, else what retrieval
    was held to (the threshold, the filter) or that nothing matched."""
    for stage in reversed(stages):
        if stage.phase is Phase.HITS and stage.input_count > 0 and stage.output_count == 0:
            said = f": {stage.warnings[-1]}" if stage.warnings else ""
            return f"no hits: stage {stage.name!r} removed all {stage.input_count}{said}"
    defaults = [ref.label for ref in plan.targets if ref.config.search.filter is not None]
    held = [f"the threshold {request.threshold:g} (hits scoring under it are dropped)"
            if request.threshold is not None else "", "the filter" if request.filter is not None else "",
            f"the default filter (search.filter) of {', '.join(defaults)}" if defaults else ""]
    held = [h for h in held if h]
    where = ", ".join(ref.label for ref in plan.targets)
    if held:
        return f"no hits: nothing in {where} passed {' and '.join(held)}"
    return f"no hits: nothing in {where} matched the query"


def _notify(recorder: TraceRecorder, stage: StageHandle, notices: tuple[str, ...]) -> None:
    """A search that ran differently from what was asked says so, on its stage and the whole trace."""
    for notice in notices:
        stage.warn(notice)
        recorder.warn(notice)


def _where(plan: RoutePlan) -> tuple[str | None, tuple[str, ...]]:
    """(the namespace, when every target shares one; the targets' labels) for lifecycle events."""
    namespaces = {ref.scope.namespace for ref in plan.targets}
    return (next(iter(namespaces)) if len(namespaces) == 1 else None), tuple(ref.label for ref in plan.targets)


def _mode(plan: RoutePlan, request: SearchRequest) -> str:
    """The retrieval mode asked of the targets: one value, or `mixed` when they differ."""
    modes = {(request.mode or ref.config.mode).value for ref in plan.targets}
    return next(iter(modes)) if len(modes) == 1 else "mixed"


def _unique(refs: tuple[CollectionRef, ...]) -> tuple[CollectionRef, ...]:
    return tuple(dict.fromkeys(refs))
