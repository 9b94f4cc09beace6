"""Chained rerankers: late interaction (MaxSim over MiniLM token vectors), the bundled
cross-encoder (cross_encoder.py), an HTTP `/rerank` service, and a score over a numeric field,
each blended with the incoming score.

A reranker re-scores the top `topK` hits it receives and re-orders them. With `rest: keep` (the
default) the hits below its `topK` follow, in their incoming order, their scores shifted under the
last re-scored hit's, so every list the pipeline passes on is sorted by one score; with `rest: drop`
only the re-scored hits go on. Each re-scored hit gains a `rerank:<name>` signal (the reranker's
raw score and rank) in its provenance.
"""

from __future__ import annotations

import math
from datetime import datetime
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

import httpx
import numpy as np

from gateway.admission.deadline import check_deadline
from gateway.admission.scheduler import offload
from gateway.embedding.base import TokenEmbedder
from gateway.errors import InvalidInput, UpstreamUnavailable
from gateway.retrieval.fusion import round_robin
from gateway.retrieval.hit import Hit, with_signal
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.stages.confidence import confidence
from gateway.retrieval.stages.fields import field_value
from gateway.retrieval.trace import StageHandle
from gateway.storage.schema import Scope
from gateway.storage.token_vectors import TokenVectorStore
from gateway.tenancy.pipelines import (
    Blend,
    HttpRerankParams,
    LateInteractionParams,
    OnError,
    RerankMerge,
    RerankParams,
    RerankRest,
    ScoreRerankParams,
    SkipIfConfidentParams,
)

RRF_K = 60


class Reranker(Protocol):
    name: str
    top_k: int
    blend: Blend
    weight: float
    # Early exit: when set, a query whose incoming top is settled is not re-scored (stages/confidence.py).
    skip_if_confident: SkipIfConfidentParams | None

    async def scores(self, request: StageRequest, hits: Sequence[Hit], handle: StageHandle) -> list[float | None]:
        """One score per hit (higher is better), or None where the reranker has no opinion."""
        ...


def index_text(hit: Hit) -> str:
    """The text a chunk was embedded from at ingest (title, newline, content)."""
    return f"{hit.title}\n{hit.content}" if hit.title else hit.content


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """ColBERT's late interaction: each query token's best cosine in the document, averaged."""
    return maxsim_many(query, [document])[0]


def maxsim_many(query: np.ndarray, documents: Sequence[np.ndarray]) -> list[float]:
    """`maxsim` for many documents with one matrix product (float16 rows are widened once)."""
    sizes = [d.shape[0] for d in documents]
    if query.shape[0] == 0 or not any(sizes):
        return [0.0] * len(documents)
    similarities = query.astype(np.float32) @ np.concatenate(documents).astype(np.float32).T
    starts = np.cumsum([0, *sizes[:-1]])
    present = [i for i, size in enumerate(sizes) if size]
    best = np.maximum.reduceat(similarities, starts[present], axis=1).mean(axis=0)
    out = [0.0] * len(documents)
    for column, index in enumerate(present):
        out[index] = float(best[column])
    return out


class LateInteractionReranker:
    """MaxSim between the question's and each chunk's MiniLM token vectors.

    Chunk token vectors come from the token-vector store (written at ingest); a missing or
    stale entry is computed from the hit's text and stored, so the first rerank of an
    un-precomputed collection is slow and later ones are not.
    """

    name = "lateInteraction"
    skip_if_confident: SkipIfConfidentParams | None = None

    def __init__(self, params: LateInteractionParams, embedder: TokenEmbedder, tokens: TokenVectorStore) -> None:
        self.top_k = params.top_k
        self.blend = params.blend
        self.weight = params.weight
        self._document_tokens = params.document_tokens
        self._embedder = embedder
        self._tokens = tokens

    async def scores(self, request: StageRequest, hits: Sequence[Hit], handle: StageHandle) -> list[float | None]:
        return await offload(self._scores, request.question, hits, handle)

    def _scores(self, question: str, hits: Sequence[Hit], handle: StageHandle) -> list[float | None]:
        # Hits are all the caller tenant's: the query-token cache is keyed by it.
        query = self._embedder.token_vectors(question, hits[0].provenance.tenant if hits else "")
        matrices: dict[str, np.ndarray] = {}
        by_scope: dict[Scope, list[Hit]] = {}
        for hit in hits:
            by_scope.setdefault(Scope(hit.provenance.tenant, hit.namespace, hit.collection), []).append(hit)
        computed = 0
        for scope, group in by_scope.items():
            check_deadline(f"late-interaction scoring of {scope.collection}")
            found = self._tokens.get(scope, [(h.id, h.provenance.content_hash) for h in group], self._document_tokens)
            missing = [h for h in group if h.id not in found]
            if missing:
                fresh = self._embedder.document_token_vectors([index_text(h) for h in missing], self._document_tokens)
                for hit, matrix in zip(missing, fresh):
                    found[hit.id] = matrix
                # Only whole chunks are cached: a compressed hit's text is not the chunk's.
                self._tokens.put(scope, [(h.id, h.source_id, h.provenance.content_hash, m)
                                         for h, m in zip(missing, fresh) if h.provenance.original_chars is None],
                                 self._document_tokens)
                computed += len(missing)
            matrices.update(found)
        handle.detail["token_vectors_computed"] = handle.detail.get("token_vectors_computed", 0) + computed
        return maxsim_many(query, [matrices[h.id] for h in hits])


class HttpReranker:
    """POST {url} {model, query, documents, top_n} -> {results: [{index, relevance_score}]}."""

    name = "http"
    skip_if_confident: SkipIfConfidentParams | None = None

    def __init__(self, params: HttpRerankParams, api_key: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.top_k = params.top_k
        self.blend = params.blend
        self.weight = params.weight
        self._params = params
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport

    async def scores(self, request: StageRequest, hits: Sequence[Hit], handle: StageHandle) -> list[float | None]:
        payload: dict[str, Any] = {"query": request.question, "documents": [h.content for h in hits],
                                   "top_n": len(hits)}
        if self._params.model:
            payload["model"] = self._params.model
        try:
            # A client per call, as in ChatClient: stages outlive event loops.
            async with httpx.AsyncClient(timeout=self._params.timeout_ms / 1000, transport=self._transport) as client:
                response = await client.post(self._params.url, json=payload, headers=self._headers)
        except httpx.TimeoutException:
            raise UpstreamUnavailable(f"rerank service {self._params.url} did not answer within "
                                      f"{self._params.timeout_ms} ms") from None
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(f"rerank service {self._params.url} is unreachable: "
                                      f"{type(exc).__name__}") from None
        if response.status_code != 200:
            raise UpstreamUnavailable(f"rerank service {self._params.url} answered HTTP {response.status_code}")
        return _rerank_scores(response, len(hits), self._params.url)


def _rerank_scores(response: httpx.Response, count: int, url: str) -> list[float | None]:
    try:
        results = response.json()["results"]
        scores: list[float | None] = [None] * count
        for item in results:
            index, score = item["index"], item["relevance_score"]
            if not isinstance(index, int) or not 0 <= index < count or not isinstance(score, (int, float)):
                raise ValueError
            scores[index] = float(score)
    except (ValueError, KeyError, TypeError):
        raise UpstreamUnavailable(f"rerank service {url} answered without results[{{index, relevance_score}}] "
                                  f"for {count} documents") from None
    return scores


class ScoreReranker:
    """A numeric field (`metadata.votes`, `updated_at`, ...) as a score; missing values are a policy."""

    name = "score"
    skip_if_confident: SkipIfConfidentParams | None = None

    def __init__(self, params: ScoreRerankParams) -> None:
        self.top_k = params.top_k
        self.blend = params.blend
        self.weight = params.weight
        self._params = params

    async def scores(self, request: StageRequest, hits: Sequence[Hit], handle: StageHandle) -> list[float | None]:
        out: list[float | None] = []
        absent = 0
        for hit in hits:
            value = field_value(hit, self._params.field)
            if isinstance(value, datetime):
                value = value.timestamp()  # newer is higher
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                if value is not None and not isinstance(value, (int, float)):
                    raise InvalidInput(f"score reranker: field {self._params.field!r} of hit "
                                       f"{hit.id!r} is {type(value).__name__}, not a number")
                if self._params.missing == "error":
                    raise InvalidInput(f"score reranker: hit {hit.id!r} has no numeric {self._params.field!r} "
                                       f"(missing: error; allowed: ignore, zero, error)")
                absent += 1
                out.append(0.0 if self._params.missing == "zero" else None)
            else:
                out.append(float(value))
        if absent:
            handle.warn(f"{absent} hit(s) without numeric {self._params.field!r} ({self._params.missing})")
        return out


class RerankStage:
    """Applies each reranker of the chain in order."""

    name = "rerank"

    def __init__(self, params: RerankParams, rerankers: Sequence[Reranker]) -> None:
        self.on_error: OnError = params.on_error
        self._rerankers = tuple(rerankers)
        self.depth = max(r.top_k for r in self._rerankers)
        self._merge = params.merge
        self._keep_rest = params.rest is RerankRest.KEEP

    async def _round_robin(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        """Every reranker ranks the incoming hits on its own; the lists are interleaved (fusion.round_robin)."""
        handle.detail["merge"] = self._merge.value
        lists = []
        for reranker in self._rerankers:
            if hits[:reranker.top_k]:
                lists.append(await self._reranked(request, hits, reranker, handle))
        merged = round_robin(lists)
        return with_rest(merged, hits) if self._keep_rest else merged

    async def apply(self, request: StageRequest, hits: list[Hit], handle: StageHandle) -> list[Hit]:
        handle.detail["chain"] = [f"{r.name}(top {r.top_k}, {r.blend.value})" for r in self._rerankers]
        given = hits
        if self._merge is RerankMerge.ROUND_ROBIN:
            hits = await self._round_robin(request, hits, handle)
        else:
            for reranker in self._rerankers:
                if not hits[:reranker.top_k]:
                    break
                reranked = await self._reranked(request, hits, reranker, handle)
                hits = with_rest(reranked, hits) if self._keep_rest else reranked
        handle.detail["rest"] = "keep" if self._keep_rest else "drop"
        _name_dropped(given, hits, request.limit, handle)
        return hits

    @staticmethod
    async def _reranked(request: StageRequest, hits: list[Hit], reranker: Reranker, handle: StageHandle) -> list[Hit]:
        """The top `topK` hits re-scored and blended, or as they came when the reranker's early exit
        finds the incoming order settled; the trace's `skip_if_confident` says which, and why."""
        top = hits[:reranker.top_k]
        if reranker.skip_if_confident is not None:
            verdict = confidence(hits, reranker.skip_if_confident)
            handle.detail.setdefault("skip_if_confident", {})[reranker.name] = (
                f"{'skipped' if verdict.settled else 'ran'}: {verdict.reason}")
            if verdict.settled:
                return top
        return blend(top, await reranker.scores(request, top, handle), reranker)


def with_rest(reranked: Sequence[Hit], incoming: Sequence[Hit]) -> list[Hit]:
    """The re-scored hits, then the incoming hits they do not hold, in their incoming order, each
    score shifted by one amount so the first sits just under the last re-scored hit's."""
    taken = {h.key for h in reranked}
    rest = [h for h in incoming if h.key not in taken]
    if not reranked or not rest:
        return [*reranked, *rest]
    floor = math.nextafter(min(h.score for h in reranked), -math.inf)
    shift = rest[0].score - floor
    return [*reranked, *(replace(h, score=h.score - shift) for h in rest)]


def _name_dropped(given: Sequence[Hit], kept: Sequence[Hit], limit: int, handle: StageHandle) -> None:
    """A reranker returns only its `topK`: the hits below it leave the result, and the trace says so."""
    kept_keys = {h.key for h in kept}
    dropped = [h for h in given if h.key not in kept_keys]
    handle.detail["dropped"] = len(dropped)
    if dropped and len(kept) < min(limit, len(given)):
        handle.warn(f"{len(dropped)} hit(s) below the rerankers' topK were dropped, leaving {len(kept)} of the "
                    f"{limit} asked for: raise topK to at least the limit to keep them "
                    f"({', '.join(h.id for h in dropped[:5])})")


def blend(hits: Sequence[Hit], scores: Sequence[float | None], reranker: Reranker) -> list[Hit]:
    """New hits ordered by the blend of incoming and reranker scores (ties by id).

    `replace`: the reranker's score. `weighted`: (1 - w) * minmax(incoming) + w * minmax(new).
    `rrf`: (1 - w) / (60 + incoming rank) + w / (60 + new rank). A None score is neutral: the
    hit keeps its incoming position's value on the reranker's side.
    """
    old = [h.score for h in hits]
    known = [s for s in scores if s is not None]
    new_rank = {i: r for r, i in enumerate(sorted((i for i, s in enumerate(scores) if s is not None),
                                                  key=lambda i: (-scores[i], hits[i].id)), start=1)}  # type: ignore[operator]
    if reranker.blend is Blend.REPLACE:
        combined = [s if s is not None else o for s, o in zip(scores, old)]
    elif reranker.blend is Blend.WEIGHTED:
        old_n = _minmax(old)
        lo, hi = (min(known), max(known)) if known else (0.0, 0.0)
        new_n = [(s - lo) / (hi - lo) if s is not None and hi > lo else (1.0 if s is not None else o)
                 for s, o in zip(scores, old_n)]
        combined = [(1 - reranker.weight) * o + reranker.weight * n for o, n in zip(old_n, new_n)]
    else:
        combined = [(1 - reranker.weight) / (RRF_K + i + 1) + reranker.weight / (RRF_K + new_rank.get(i, i + 1))
                    for i in range(len(hits))]
    out = []
    for i, hit in enumerate(hits):
        if scores[i] is not None:
            out.append(with_signal(hit, f"rerank:{reranker.name}", scores[i], new_rank[i],  # type: ignore[arg-type]
                                   score=combined[i]))
        else:
            out.append(replace(hit, score=combined[i]))
    out.sort(key=lambda h: (-h.score, h.id))
    return out


def _minmax(values: Sequence[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) if hi > lo else 1.0 for v in values]
