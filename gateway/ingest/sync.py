"""Idempotent ingest of documents into one tenant collection.

Per chunk, a content hash decides: unchanged chunks are neither embedded nor written;
new or changed chunks are embedded and upserted; chunks a source no longer has are deleted;
with `prune`, sources absent from this run are deleted too.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate, islice

import numpy as np
from tqdm import tqdm

from gateway.embedding.base import Embedder, Modality, modalities_of, token_embedder
from gateway.embedding.images import IMAGE_SUFFIXES, open_image
from gateway.embedding.modal import collection_embedder
from gateway.errors import CollectionFull, InvalidInput, ModeNotSupported, allowed
from gateway.ingest.chunker import Chunked, chunk_pages, chunk_text
from gateway.ingest.content_keys import compose
from gateway.ingest.graph import check_links, infer_edges
from gateway.ingest.hashing import ChunkHashes, content_hash
from gateway.ingest.loaders import Document
from gateway.ingest.vectors import chunk_given
from gateway.storage.vectors import check_dimension, unit_length, vector_digest
from gateway.retrieval.hit import chunk_row_id, split_row_id
from gateway.storage.edges import EdgeStore
from gateway.storage.milvus import ChunkRecord, MilvusStore, ParentRecord, Removed
from gateway.storage.identifiers import check_source_id
from gateway.storage.schema import MAX_ID, MAX_SHORT, Scope
from gateway.storage.token_vectors import TokenTarget, TokenVectorStore
from gateway.storage.analyzer import analyzer_for
from gateway.tenancy.config import ChunkingConfig
from gateway.tenancy.registry import CollectionRef
from gateway.values import check_json, has_surrogate

log = logging.getLogger(__name__)
# Metadata is a flat map in practice; the cap keeps every reader of it (filters, JSON columns) shallow.
MAX_METADATA_DEPTH = 16

@dataclass(frozen=True, slots=True)
class Unchanged:
    """A chunk already stored as it is; it may still lack token vectors."""

    row_id: str
    source_id: str
    content_hash: str
    index_text: str


# Documents handled per round of diff -> embed -> write; bounds memory on large corpora.
WINDOW = 256
# With a progress bar, a window's chunks are embedded this many at a time and each document counts
# once its chunks are embedded: about 0.5 s of the bundled model's work (1,000-character chunks, two
# shared cores), where a whole window was minutes without a visible move. 64 chunks took 4.8 s in one
# call and 3.9 s in slices of 8 on that machine: slicing costs nothing measurable.
EMBED_SLICE = 8

# Chunks with their own vectors a round may hold per document of WINDOW: 16,384 chunks of 384
# float32 and 1 KB of text are about 40 MB. Each round's flush costs milvus-lite a data file, a
# compaction and a count of every row: a 50,000-chunk load took 29.1 CPU s in rounds of 4,096 and
# 26.3 in rounds of 16,384 (benchmarks/bulk_vectors.py), and the counts grow with the collection.
GIVEN_PER_DOCUMENT = 64


@dataclass
class IngestReport:
    sources: int = 0
    chunks: int = 0
    chunks_written: int = 0
    chunks_unchanged: int = 0
    chunks_deleted: int = 0
    parents_written: int = 0
    token_vectors_written: int = 0
    sources_pruned: int = 0
    embed_seconds: float = 0.0
    edges_written: int = 0
    store_seconds: float = 0.0
    # The dense index switch this run's writes led to (collection size past its policy's `auto_rows`),
    # done once after the last write, and not in store_seconds; `dense_index` is the one it has after.
    index_seconds: float = 0.0
    dense_index: str = ""
    elapsed_seconds: float = 0.0
    touched_sources: set[str] = field(default_factory=set, repr=False)
    # (sourceId, chunkId) of every chunk written, and of every stale chunk deleted, so an API
    # caller can tell a client cache which entries changed; not in the summary.
    written: list[tuple[str, str]] = field(default_factory=list, repr=False)
    deleted: list[tuple[str, str]] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, float | int]:
        return {k: (round(v, 3) if isinstance(v, float) else v)
                for k, v in self.__dict__.items() if k not in ("touched_sources", "written", "deleted")}


def ingest_documents(store: MilvusStore, embedder: Embedder | None, ref: CollectionRef,
                     documents: Iterable[Document], *, prune: bool | Callable[[], bool] = False,
                     progress: bool | None = None, now_ms: int | None = None,
                     tokens: TokenTarget | None = None, total: int | None = None,
                     on_window: Callable[[IngestReport], None] | None = None,
                     on_rows: Callable[[str, int], None] | None = None,
                     window: int = WINDOW) -> IngestReport:
    """Bring the collection in line with `documents`. `progress=None` shows a bar on a terminal;
    with `total` (documents expected) it shows the percentage and the time left.

    With `tokens` (and an embedder that has token vectors), each written chunk's token vectors
    are stored from the same forward pass, for late-interaction reranking. `on_window` hears the
    report after every committed window of `window` documents (ingest jobs record progress there).

    `prune` deletes the sources this run did not bring; a callable is asked once the last document is
    read and written, so `documents` can stream (`gateway ingest --prune` skips the prune when a file
    could not be read, without holding every document in memory to find out first). `on_rows(step,
    rows)` hears the prune's progress: "prune chunks", then "prune parents", with the rows deleted so far.
    """
    started = time.perf_counter()
    report = IngestReport()
    scope = ref.scope
    # An image collection's vectors come from its image encoder, and have that encoder's size.
    embedder = collection_embedder(ref.config, embedder)  # type: ignore[assignment]
    if embedder is None or Modality.TEXT not in modalities_of(embedder):
        tokens = None  # token vectors are a text model's; an image has none
    # Without an embedder, only chunks that bring their vectors can be written (_diff refuses others).
    dim, model = (embedder.dim, embedder.name) if embedder is not None else (store.dim, "")
    store.ensure(scope, dim=dim, index=ref.config.index.policy())
    t0 = time.perf_counter()
    stored = store.inventory(scope)
    stored_parents = store.parent_inventory(scope)
    report.store_seconds += time.perf_counter() - t0
    by_source: dict[str, set[str]] = {}
    for row_id, row in stored.items():
        by_source.setdefault(row.source_id, set()).add(row_id)
    parents_by_source: dict[str, set[str]] = {}
    for key, row in stored_parents.items():
        parents_by_source.setdefault(row.source_id, set()).add(key)
    seen: set[str] = set()
    rows = len(stored)  # the collection's chunks as this run writes: checked against store.max_chunks
    stamp = now_ms if now_ms is not None else int(time.time() * 1000)

    bar = tqdm(desc=f"ingest {ref.label}", unit="doc", total=total,
               disable=None if progress is None else not progress)
    visible = not bar.disable  # closing the bar disables it
    try:
        for batch in _windows(_reading(documents, bar), window):
            pending: list[ChunkRecord] = []
            parents: list[ParentRecord] = []
            stale: list[str] = []
            stale_parents: list[str] = []
            unchanged: list[Unchanged] = []
            pending_per_doc: list[list[ChunkRecord]] = []
            for doc in batch:
                _validate(doc)
                if doc.source_id in seen:
                    raise InvalidInput(f"source id {doc.source_id!r} appears twice in this ingest")
                seen.add(doc.source_id)
                report.sources += 1
                new_ids, parent_keys, doc_pending, doc_parents, doc_unchanged = _diff(
                    doc, ref, model, stored, stored_parents, stamp, dim, embedded=embedder is not None)
                report.chunks += len(new_ids)
                report.chunks_unchanged += len(new_ids) - len(doc_pending)
                pending.extend(doc_pending)
                pending_per_doc.append(doc_pending)
                unchanged.extend(doc_unchanged)
                parents.extend(doc_parents)
                stale.extend(sorted(by_source.get(doc.source_id, set()) - new_ids))
                stale_parents.extend(sorted(parents_by_source.get(doc.source_id, set()) - parent_keys))
                if doc_pending or doc_parents:
                    report.touched_sources.add(doc.source_id)
            # Documents in order, each done once the embedded chunks reach the end of its own.
            ends = list(accumulate(len(by_doc) for by_doc in pending_per_doc))
            shown = 0

            def embedded(chunks: int) -> None:
                nonlocal shown
                done = bisect_right(ends, chunks)
                if done > shown:
                    bar.update(done - shown)
                    shown = done

            added = sum(1 for r in pending if _row_id(ref, r) not in stored) - len(stale)
            _check_size(store, ref, rows + added, report)
            try:
                written = _write(store, embedder, ref, pending, parents, stale, stale_parents, report, tokens,
                                 on_embedded=None if bar.disable else embedded)
            except Exception:
                _undo(store, ref, tokens, [r for r in pending if _row_id(ref, r) not in stored],
                      [p.key for p in parents if p.key not in stored_parents])
                raise
            rows += added
            report.edges_written += infer_edges(store, ref, written, stale)
            if tokens is not None:
                _backfill_tokens(tokens, embedder, ref, unchanged, report)
            bar.update(len(batch) - shown)
            bar.set_postfix(written=report.chunks_written, unchanged=report.chunks_unchanged)
            if on_window is not None:
                on_window(report)
    finally:
        bar.close()

    if prune if isinstance(prune, bool) else prune():
        # Sources with parents but no chunks too: what a crash mid-write or mid-delete left.
        gone = sorted((set(by_source) | set(parents_by_source)) - seen)
        t0 = time.perf_counter()
        report.chunks_deleted += remove_sources(store, tokens.store if tokens else None, scope, gone,
                                                on_rows=on_rows).chunks
        report.store_seconds += time.perf_counter() - t0
        report.sources_pruned = len(gone)
    if report.chunks_written:
        t0 = time.perf_counter()
        building = (lambda kind, count: print(f"ingest {ref.label}: building the {kind} index of {count:,} chunks",
                                              file=sys.stderr, flush=True)) if visible else None
        state = store.reconcile_index(scope, on_switch=building)
        report.index_seconds = time.perf_counter() - t0
        report.dense_index = state.index_type if state is not None else ""
    report.elapsed_seconds = time.perf_counter() - started
    return report


def _check_size(store: MilvusStore, ref: CollectionRef, rows: int, report: IngestReport) -> None:
    limit = store.max_chunks
    if limit is not None and rows > limit:
        raise CollectionFull(
            f"collection {ref.label!r} would hold {rows:,} chunks after this write; the embedded store (milvus-lite) "
            f"takes at most {limit:,} per collection (GATEWAY_EMBEDDED_MAX_CHUNKS), because its search time grows "
            f"with every row; for more, run a Milvus server (GATEWAY_MILVUS_URI=http://host:19530, "
            f"docs/operations.md). Written before this window: {report.chunks_written:,} chunks")


def remove_source(store: MilvusStore, tokens: TokenVectorStore | None, scope: Scope, source_id: str) -> Removed:
    """A source's chunks and parents, and what is derived from them: token vectors and similarity edges."""
    removed = store.delete_source(scope, source_id)
    if tokens is not None:
        tokens.delete_source(scope, source_id)
    EdgeStore(store).delete_sources(scope, [source_id])
    return removed


def _reading(documents: Iterable[Document], bar: tqdm) -> Iterator[Document]:
    """The documents, the bar redrawn as each is read (its elapsed time moves while a window of PDFs loads)."""
    for read, doc in enumerate(documents, 1):
        bar.set_postfix_str(f"read {read}", refresh=False)
        bar.update(0)  # redraws at most every `mininterval` (0.1 s)
        yield doc


def remove_sources(store: MilvusStore, tokens: TokenVectorStore | None, scope: Scope,
                   source_ids: Sequence[str], on_rows: Callable[[str, int], None] | None = None) -> Removed:
    """`remove_source` for many sources, in a few batched deletes rather than several per source."""
    if not source_ids:
        return Removed(chunks=0, parents=0)
    removed = store.delete_sources(scope, source_ids, on_rows=on_rows)
    if tokens is not None:
        tokens.delete_sources(scope, source_ids)
    EdgeStore(store).delete_sources(scope, source_ids)
    return removed


def _windows(documents: Iterable[Document], size: int) -> Iterator[list[Document]]:
    """Rounds of at most `size` documents to embed, or `size * GIVEN_PER_DOCUMENT` chunks that brought
    their vectors: those cost no embedding, and each round's flushes cost milvus-lite a data file
    and a count of the collection's rows, so a bulk load of vectors goes in few, large rounds."""
    window: list[Document] = []
    embedded = given = 0
    for doc in documents:
        window.append(doc)
        if doc.chunks:
            given += len(doc.chunks)
        else:
            embedded += 1
        if embedded >= size or given >= size * GIVEN_PER_DOCUMENT:
            yield window
            window, embedded, given = [], 0, 0
    if window:
        yield window


def _validate(doc: Document) -> None:
    check_source_id(doc.source_id)
    for name in ("text", "title", "source_url", "source_path"):
        value = getattr(doc, name)
        if has_surrogate(value):
            raise InvalidInput(f"document {doc.source_id!r}: {name} contains a lone UTF-16 surrogate; "
                               "allowed: valid Unicode text")
        if name != "text" and len(value.encode("utf-8")) > MAX_SHORT:
            raise InvalidInput(f"document {doc.source_id!r}: {name} is {len(value)} characters; "
                               f"at most {MAX_SHORT} bytes are stored")
    for index, chunk in enumerate(doc.chunks):
        if has_surrogate(chunk.text):
            raise InvalidInput(f"document {doc.source_id!r}: text of chunk {index} contains a lone UTF-16 "
                               "surrogate; allowed: valid Unicode text")
    check_json(dict(doc.metadata), where=f"metadata of document {doc.source_id!r}", max_depth=MAX_METADATA_DEPTH)
    check_links(doc.source_id, doc.metadata)


def _diff(doc: Document, ref: CollectionRef, model: str, stored, stored_parents, stamp: int,
          dim: int, embedded: bool = True) -> tuple[set[str], set[str], list[ChunkRecord], list[ParentRecord],
                                                    list[Unchanged]]:
    """`embedded`: whether an embedder is there for chunks that bring no vector."""
    scope, config = ref.scope, ref.config
    if not embedded and not doc.chunks:
        raise ModeNotSupported(f"document {doc.source_id!r} brings no vectors, and this gateway has no embedder "
                               f"configured to compute them; send each chunk's vector (`chunks` with `vector`, or "
                               f"`vector` beside `text`), or configure GATEWAY_EMBEDDER")
    holds = config.modality
    if doc.chunks and Modality.IMAGE in holds:
        raise InvalidInput(f"document {doc.source_id!r} brings its own vectors, and collection {ref.label!r} holds "
                           f"images, whose vectors the gateway computes from the image files; allowed here: "
                           f"{allowed(IMAGE_SUFFIXES)} files. Send vectors to a text collection")
    if (doc.image is not None) != (Modality.IMAGE in holds):
        kind = "an image" if doc.image is not None else "text"
        raise InvalidInput(f"document {doc.source_id!r} is {kind}, and collection {ref.label!r} holds "
                           f"{', '.join(holds)} only; allowed here: "
                           + (f"{allowed(IMAGE_SUFFIXES)} files" if Modality.IMAGE in holds else "text documents"))
    if doc.image is not None:
        return _diff_image(doc, ref, model, stored, stored_parents, stamp)
    chunked = chunk_document(doc, config.chunking)
    source_url = doc.source_url or _template_url(config.source_url_template, doc.source_id)
    parents: list[ParentRecord] = []
    parent_keys: list[str] = []
    for index, text in enumerate(chunked.parents):
        key = f"{doc.source_id}#p{index}"
        parent_keys.append(key)
        digest = content_hash(text=text, title=doc.title, metadata=doc.metadata)
        previous = stored_parents.get(key)
        if previous is None or previous.content_hash != digest:
            parents.append(ParentRecord(key=key, source_id=doc.source_id, title=doc.title, text=text,
                                        content_hash=digest, metadata=doc.metadata))
    ids: set[str] = set()
    pending: list[ChunkRecord] = []
    unchanged: list[Unchanged] = []
    keys = config.content_keys
    # A client's vector is not the gateway's: its chunks' hashes name no model (hashing.py).
    hashed_model = "" if doc.chunks else model
    hashes = ChunkHashes(title=doc.title, metadata=doc.metadata, source_url=source_url, source_path=doc.source_path,
                         model=hashed_model, keys=keys.tag)
    paged = {}  # page -> that page's hashes (a PDF chunk's metadata carries its page)
    for chunk in chunked.children:
        row_id = chunk_row_id(scope.namespace, doc.source_id, chunk.chunk_id)
        if len(row_id) > MAX_ID:
            raise InvalidInput(f"source id {doc.source_id!r} makes a row id longer than {MAX_ID} characters")
        ids.add(row_id)
        parent_key = parent_keys[chunk.parent_index]
        # A PDF chunk cites its page: `metadata.page`, filterable like any metadata key.
        metadata = doc.metadata if chunk.page is None else {**doc.metadata, "page": chunk.page}
        vector = None
        hashed = hashes
        if chunk.page is not None:
            hashed = paged.get(chunk.page) or paged.setdefault(chunk.page, ChunkHashes(
                title=doc.title, metadata=metadata, source_url=source_url, source_path=doc.source_path,
                model=hashed_model, keys=keys.tag))
        if doc.chunks:
            given = doc.chunks[int(chunk.chunk_id)]
            check_dimension(given.vector, dim, f"vector of document {doc.source_id!r} chunk {chunk.chunk_id}",
                            ref.label)
            # Hashed as stored, so that `gateway verify` can recompute the hash from the row.
            vector = given.vector if given.digest else unit_length(given.vector)
            digest = hashed(text=chunk.text, parent_key=parent_key, vector=given.digest or vector_digest(vector))
        else:
            digest = hashed(text=chunk.text, parent_key=parent_key)
        previous = stored.get(row_id)
        # A chunk with its own vector is never embedded here: what would be embedded is not needed.
        embed_text = "" if vector is not None else compose(keys.embed, title=doc.title, content=chunk.text,
                                                           metadata=metadata)
        if previous is not None and previous.content_hash == digest:
            if vector is None:  # a client's chunk gets no token vectors (see _write)
                unchanged.append(Unchanged(row_id, doc.source_id, digest, embed_text))
            continue
        index_text = compose(keys.index, title=doc.title, content=chunk.text, metadata=metadata)
        created = previous.created_at if previous is not None and previous.created_at else stamp
        record = ChunkRecord(
            source_id=doc.source_id, chunk_id=chunk.chunk_id, parent_key=parent_key, text=chunk.text,
            title=doc.title, content_hash=digest, created_at=created, updated_at=stamp, dense=vector,  # type: ignore[arg-type]
            source_url=source_url, source_path=doc.source_path, metadata=metadata, index_text=index_text,
            embed_text=embed_text)
        pending.append(record)
    return ids, set(parent_keys), pending, parents, unchanged


def chunk_document(doc: Document, config: ChunkingConfig) -> Chunked:
    """A paged document page by page (chunks carry their page), chunks a client cut as they are,
    anything else as one flow."""
    if doc.chunks:
        return chunk_given(doc.chunks, config, f"document {doc.source_id!r}")
    return chunk_pages(doc.pages, config) if doc.pages else chunk_text(doc.text, config)


def _diff_image(doc: Document, ref: CollectionRef, model: str, stored, stored_parents,
                stamp: int) -> tuple[set[str], set[str], list[ChunkRecord], list[ParentRecord], list[Unchanged]]:
    """An image is one chunk ("0") under one parent, both holding its caption; its vector is the image's."""
    assert doc.image is not None
    scope = ref.scope
    caption = doc.text.strip() or doc.title or doc.source_id
    source_url = doc.source_url or _template_url(ref.config.source_url_template, doc.source_id)
    key = f"{doc.source_id}#p0"
    parents = []
    digest = content_hash(text=caption, title=doc.title, metadata=doc.metadata)
    previous_parent = stored_parents.get(key)
    if previous_parent is None or previous_parent.content_hash != digest:
        parents.append(ParentRecord(key=key, source_id=doc.source_id, title=doc.title, text=caption,
                                    content_hash=digest, metadata=doc.metadata))
    row_id = chunk_row_id(scope.namespace, doc.source_id, "0")
    if len(row_id) > MAX_ID:
        raise InvalidInput(f"source id {doc.source_id!r} makes a row id longer than {MAX_ID} characters")
    digest = content_hash(text=caption, title=doc.title, metadata=doc.metadata, source_url=source_url,
                          source_path=doc.source_path, parent_key=key, model=model,
                          image=hashlib.sha256(doc.image).hexdigest())
    previous = stored.get(row_id)
    if previous is not None and previous.content_hash == digest:
        return {row_id}, {key}, [], parents, []
    created = previous.created_at if previous is not None and previous.created_at else stamp
    record = ChunkRecord(
        source_id=doc.source_id, chunk_id="0", parent_key=key, text=caption, title=doc.title, content_hash=digest,
        created_at=created, updated_at=stamp, dense=None, source_url=source_url,  # type: ignore[arg-type]
        source_path=doc.source_path, metadata=doc.metadata, index_text=caption, modality=Modality.IMAGE.value,
        image=doc.image)
    return {row_id}, {key}, [record], parents, []


def _embed_images(embedder: object, pending: list[ChunkRecord]) -> np.ndarray:
    """One image decoded at a time: a window of large images is never held decoded at once."""
    encode = embedder.embed_images  # type: ignore[attr-defined]
    rows = [encode([open_image(p.image, where=f"image {p.source_id!r}")])[0] for p in pending]
    return np.stack(rows)


def _backfill_tokens(tokens: TokenTarget, embedder: Embedder, ref: CollectionRef,
                     unchanged: list[Unchanged], report: IngestReport) -> None:
    """Token vectors for unchanged chunks that have none yet (a pipeline was added later)."""
    with_tokens = token_embedder(embedder)
    if with_tokens is None or not unchanged:
        return
    present = tokens.store.present(ref.scope, [(u.row_id, u.content_hash) for u in unchanged], tokens.max_tokens)
    missing = [u for u in unchanged if u.row_id not in present]
    if not missing:
        return
    t0 = time.perf_counter()
    matrices = with_tokens.document_token_vectors([u.index_text for u in missing], tokens.max_tokens)
    report.embed_seconds += time.perf_counter() - t0
    tokens.store.put(ref.scope, [(u.row_id, u.source_id, u.content_hash, m) for u, m in zip(missing, matrices)],
                     tokens.max_tokens)
    report.token_vectors_written += len(missing)


def _row_id(ref: CollectionRef, record: ChunkRecord) -> str:
    return chunk_row_id(ref.scope.namespace, record.source_id, record.chunk_id)


def _undo(store: MilvusStore, ref: CollectionRef, tokens: TokenTarget | None,
          new_chunks: list[ChunkRecord], new_parents: list[str]) -> None:
    """After a failed write, remove the rows it created, so a failed upsert leaves nothing behind.

    Rows it changed keep whichever version was written; the caller reports the failure and a
    repeat of the same request converges. If storage is down, the undo fails too: then the
    repeat (or --prune) removes them, and the log says so.
    """
    rows = [_row_id(ref, r) for r in new_chunks]
    try:
        if rows:
            store.delete_chunks(ref.scope, rows)
            if tokens is not None:
                tokens.store.delete_rows(ref.scope, rows)
        if new_parents:
            store.delete_parents(ref.scope, new_parents)
    except Exception as exc:  # the write's own error is what the caller sees
        log.warning("could not undo a failed write to %s (%s); repeat the same ingest to remove %d new chunks "
                    "and %d new parents", ref.label, type(exc).__name__, len(rows), len(new_parents))


def _template_url(template: str | None, source_id: str) -> str:
    return template.format(source_id=source_id) if template else ""


def _write(store: MilvusStore, embedder: Embedder, ref: CollectionRef, pending: list[ChunkRecord],
           parents: list[ParentRecord], stale: list[str], stale_parents: list[str],
           report: IngestReport, tokens: TokenTarget | None = None,
           on_embedded: Callable[[int], None] | None = None) -> list[ChunkRecord]:
    """`on_embedded`: told how many of `pending` are embedded so far, after every EMBED_SLICE of them."""
    scope = ref.scope
    with_tokens = token_embedder(embedder) if tokens is not None else None
    matrices: list = []
    if on_embedded is not None:
        on_embedded(0)  # documents with nothing to embed are done already
    # Chunks that brought their own vectors are stored as they are; they get no token vectors
    # (a late-interaction stage computes a missing row's at query time). For the progress bar they
    # count as done first (a window rarely mixes them with chunks to embed).
    given = [p for p in pending if p.dense is not None]
    embedded: list[ChunkRecord] = []
    to_embed = [p for p in pending if p.dense is None]
    if to_embed:
        t0 = time.perf_counter()
        step = EMBED_SLICE if on_embedded is not None else len(to_embed)
        parts = []
        for start in range(0, len(to_embed), step):
            part = to_embed[start:start + step]
            texts = [p.embed_text or p.index_text for p in part]
            if part[0].image is not None:  # a collection holds one modality (tenancy config)
                parts.append(_embed_images(embedder, part))
            elif with_tokens is not None:
                vectors, part_matrices = with_tokens.embed_documents_with_tokens(texts, token_limit=tokens.max_tokens)
                parts.append(vectors)
                matrices.extend(part_matrices)
            else:
                parts.append(embedder.embed_documents(texts))
            if on_embedded is not None:
                on_embedded(len(given) + start + len(part))
        vectors = parts[0] if len(parts) == 1 else np.concatenate(parts)
        report.embed_seconds += time.perf_counter() - t0
        embedded = [replace(p, dense=vector, image=None) for p, vector in zip(to_embed, vectors)]
    records = given + embedded
    t0 = time.perf_counter()
    # Chunks, then what hangs off them (token vectors, parents), then what is stale. A crash at any
    # point leaves at worst a chunk whose parent or token vectors are not there yet (parentExpand
    # reports it, a missing token row is computed at query time) or stale rows of a source that a
    # re-run of the same ingest (or --prune) removes; never rows that no run would look at.
    # The dense index follows the collection's size once, after the last write (ingest_documents).
    store.upsert_chunks(scope, records, analyzer_for(ref.config.language), reconcile=False)
    if tokens is not None:
        tokens.store.put(scope, [(_row_id(ref, r), r.source_id, r.content_hash, m)
                                 for r, m in zip(embedded, matrices)], tokens.max_tokens)
        report.token_vectors_written += len(matrices)
    store.upsert_parents(scope, parents)
    if stale:
        report.chunks_deleted += store.delete_chunks(scope, stale)
        report.deleted.extend(split_row_id(scope.namespace, row_id) for row_id in stale)
        if tokens is not None:
            tokens.store.delete_rows(scope, stale)
    if stale_parents:
        store.delete_parents(scope, stale_parents)
    report.store_seconds += time.perf_counter() - t0
    report.chunks_written += len(records)
    report.written.extend((r.source_id, r.chunk_id) for r in records)
    report.parents_written += len(parents)
    return records
