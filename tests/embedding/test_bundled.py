import os
import subprocess
import sys
import threading
import time

import numpy as np

from gateway.embedding.base import CachedEmbedder
from gateway.embedding.bundled import DIM, MAX_TOKENS, FifoLock, model_files
from tests.conftest import ROOT


def test_model_ships_inside_installed_packages():
    model, tokenizer = model_files()
    assert model.stat().st_size > 20_000_000 and tokenizer.is_file()
    assert "site-packages" in str(model) or "dist-packages" in str(model)


def test_vectors_are_normalised_and_semantic(embedder):
    docs = embedder.embed_documents(["The cat sat on the mat.", "Stock markets fell sharply today.",
                                     "A kitten is resting on a rug."])
    assert docs.shape == (3, DIM) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    query = embedder.embed_query("a small cat lying on a carpet")
    sims = docs @ query
    assert sims[2] > sims[1] and sims[0] > sims[1]


def test_batching_and_ordering_do_not_change_vectors(embedder):
    texts = ["short", "a somewhat longer sentence about retrieval", "mid length text here"]
    together = embedder.embed_documents(texts)
    alone = np.stack([embedder.embed_documents([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-4)
    assert np.allclose(embedder.embed_query(texts[1]), together[1], atol=1e-4)


def test_long_text_is_truncated_not_rejected(embedder):
    vector = embedder.embed_documents(["word " * (MAX_TOKENS * 4)])
    assert vector.shape == (1, DIM)


def test_query_cache_serves_repeats(embedder):
    cached = CachedEmbedder(embedder.inner, size=2)
    first = cached.embed_query("alpha")
    assert cached.embed_query("alpha") is first and cached.hits == 1
    cached.embed_query("beta"), cached.embed_query("gamma")
    cached.embed_query("alpha")
    assert cached.misses == 4  # evicted by LRU after two newer entries


def test_token_vectors_for_late_interaction(embedder):
    tokens = embedder.inner.token_vectors("late interaction scoring")
    assert tokens.shape[1] == DIM and tokens.shape[0] >= 3
    # Stored as float16, so unit length holds to about three decimals.
    assert np.allclose(np.linalg.norm(tokens, axis=1), 1.0, atol=1e-3)


def test_query_token_vectors_reuse_the_embedding_pass(embedder):
    inner = embedder.inner
    text = "does late interaction reuse the query pass"
    inner.embed_query(text)
    reused = inner.token_vectors(text)
    inner._query_tokens.clear()
    fresh = inner.token_vectors(text)
    assert np.allclose(reused, fresh, atol=1e-3) and not reused.flags.writeable


def test_fifo_lock_is_granted_in_arrival_order():
    lock = FifoLock()
    order: list[int] = []
    lock.__enter__()
    threads = []
    for i in range(5):
        thread = threading.Thread(target=lambda i=i: (lock.__enter__(), order.append(i), lock.__exit__()))
        thread.start()
        threads.append(thread)
        while len(lock._waiters) < i + 1:  # each waiter queued before the next starts
            time.sleep(0.001)
    lock.__exit__()
    for thread in threads:
        thread.join(timeout=10)
    assert order == [0, 1, 2, 3, 4]


def test_a_query_runs_on_one_thread_beside_document_batches_and_no_session_spins(embedder):
    inner = embedder.inner
    for session in (inner._session, inner._query_session):
        config = session.get_session_options()
        assert config.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert inner._query_session.get_session_options().intra_op_num_threads == 1
    text = "how long do refunds take to arrive"
    expected = inner.embed_documents([text])[0]
    done: list[np.ndarray] = []
    with inner._lock:  # a document batch holds the model's shared session
        thread = threading.Thread(target=lambda: done.append(inner.embed_query(text)))
        thread.start()
        thread.join(timeout=30)
        assert done, "the query waited for the document batch"
    assert np.allclose(done[0], expected, atol=1e-5)


def _growth_mib(build: str, run: str) -> float:
    """How much a fresh process's private memory grows over `run`, after `build` and a first small run."""
    script = f"""
from pathlib import Path
def private_kib():
    fields = dict(line.split(":", 1) for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:])
    return int(fields["Private_Clean"].split()[0]) + int(fields["Private_Dirty"].split()[0])
{build}
before = private_kib()
{run}
print((private_kib() - before) / 1024)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return float(done.stdout.strip().splitlines()[-1])


LONG_PASSAGE = "Refunds are paid to the original card within fourteen days of the request. " * 30


def test_a_document_batch_hands_its_working_memory_back():
    # onnxruntime's arena kept a 16 x 256-token batch's working set for the process's life: +287 MiB.
    growth = _growth_mib("from gateway.embedding.bundled import BundledEmbedder\n"
                         "embedder = BundledEmbedder()\nembedder.embed_documents(['warm up'])",
                         f"embedder.embed_documents([{LONG_PASSAGE!r}] * 16)")
    assert growth < 64, growth


def test_a_shared_model_is_built_once_by_concurrent_first_uses():
    from gateway.embedding.bundled import SharedModel
    from gateway.embedding.models import ModelSource

    builds = []

    def build(source):
        time.sleep(0.05)  # a session load: long enough for every thread to arrive meanwhile
        builds.append(source)
        return object()

    shared = SharedModel(build)
    assert not shared.loaded
    results = []
    threads = [threading.Thread(target=lambda: results.append(shared())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len({id(r) for r in results}) == 1 and shared.loaded
    other = shared(ModelSource(ROOT))  # another source is another model
    assert other is not results[0] and len(builds) == 2


def test_rerankers_load_their_models_on_first_use_not_when_a_pipeline_is_built():
    growth = _growth_mib(
        "import sys\n"
        "from gateway.retrieval.stages.colbert import ColbertReranker, shared_model as colbert\n"
        "from gateway.retrieval.stages.cross_encoder import CrossEncoderReranker, shared_model as cross\n"
        "from gateway.tenancy.pipelines import ColbertParams, CrossEncoderParams",
        "CrossEncoderReranker(CrossEncoderParams()); ColbertReranker(ColbertParams())\n"
        "assert not cross.loaded and not colbert.loaded and 'onnxruntime' not in sys.modules\n"
        "cross().score('refunds', ['Refunds are paid within 14 days.'])\n"
        "assert cross.loaded and not colbert.loaded")
    assert 20 < growth < 200, growth  # the cross-encoder's session alone


def test_queries_embedded_together_get_the_vectors_they_get_alone(embedder):
    # Queries waiting at once share a forward pass (embedding/batching.py); padding is masked.
    texts = ["refund", "how do I rotate a leaked API key for my team?", "nightly backups of every volume",
             "Is there a limit on the number of seats in a Team plan, and can one change it later?"]
    alone = np.stack([embedder.embed_query(text) for text in texts])
    bundled = embedder._inner
    hidden = bundled._query_pass([bundled._tokenizer.encode(text).ids for text in texts])
    assert [h.shape[0] for h in hidden] == [len(bundled._tokenizer.encode(text).ids) for text in texts]
    pooled = np.stack([h.mean(axis=0) / np.linalg.norm(h.mean(axis=0)) for h in hidden])
    assert np.allclose(pooled, alone, atol=1e-5)


def test_concurrent_queries_share_passes_and_each_gets_its_own_vector(embedder):
    texts = [f"question number {i} about {topic}" for i, topic in
             enumerate(["refunds", "backups", "seats", "invoices", "keys", "regions", "quotas", "exports"] * 2)]
    alone = {text: embedder.embed_query(text) for text in texts}
    bundled = embedder._inner  # past the query cache
    sizes: list[int] = []
    run_pass = bundled._queries._run_batch

    def recording(items):
        sizes.append(len(items))
        time.sleep(0.01)  # long enough for the other threads to queue behind the passes running
        return run_pass(items)

    bundled._queries._run_batch = recording
    try:
        together: dict[str, np.ndarray] = {}
        threads = [threading.Thread(target=lambda t=text: together.__setitem__(t, bundled.embed_query(t)))
                   for text in texts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        bundled._queries._run_batch = run_pass
    assert set(together) == set(texts)
    assert all(np.allclose(together[text], alone[text], atol=1e-5) for text in texts)
    assert sum(sizes) == len(texts) and max(sizes) > 1 and len(sizes) < len(texts)
