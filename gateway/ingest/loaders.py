"""Read documents from .md / .txt / .pdf / .html files, directories of them, and BEIR-style JSONL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gateway.embedding.images import IMAGE_SUFFIXES, MAX_IMAGE_BYTES
from gateway.errors import InvalidInput, allowed
from gateway.ingest import jsonl_reader
from gateway.ingest.formats import (HTML_SUFFIXES, PDF_SUFFIXES, Extracted, Unreadable, read_html, read_pdf,
                                    read_text)
from gateway.ingest.vectors import VectorChunk
from gateway.storage.vectors import VectorEncoding, read_vector

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
IMAGE_SUFFIX_SET = frozenset(IMAGE_SUFFIXES)
JSONL_SUFFIXES = frozenset({".jsonl"})
SUPPORTED = TEXT_SUFFIXES | JSONL_SUFFIXES | PDF_SUFFIXES | HTML_SUFFIXES | IMAGE_SUFFIX_SET
# What a directory walk reads for a text collection (an image collection's walk reads images only).
DOCUMENT_SUFFIXES = SUPPORTED - IMAGE_SUFFIX_SET
_HEADING = re.compile(r"^\s{0,3}#\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Document:
    """One source: everything its chunks are cut from and cite."""

    source_id: str
    text: str
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source_path: str = ""
    source_url: str = ""
    # A paged format's text page by page (page n is pages[n - 1]); each chunk then lies on one
    # page and carries `metadata.page`. Empty: `text` is cut as one flow.
    pages: tuple[str, ...] = ()
    # An image source's file bytes (PNG or JPEG); `text` is then its caption (load_image).
    image: bytes | None = field(default=None, repr=False)
    # Chunks the client cut and embedded itself (ingest/vectors.py): stored as given, not embedded;
    # `text` is then unused.
    chunks: tuple[VectorChunk, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class Unread:
    """A file that was not ingested, and why (reported by the CLI and by ingest jobs)."""

    path: str
    reason: str
    # How the job reports it: INVALID_INPUT, or LIMIT_EXCEEDED for an upload over its parse budget.
    code: str = "INVALID_INPUT"

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def load_paths(paths: Sequence[Path], unreadable: list[Unread] | None = None, *,
               images: bool = False, ahead: jsonl_reader.ReadAhead | None = None) -> Iterator[Document]:
    """Documents from files and directories, in a stable order.

    A directory gives its documents, or with `images` (an image collection) its png/jpg files:
    the screenshots beside a docs folder's markdown are not documents of a text collection.
    A file named explicitly is read whatever it is.

    A file that cannot be read (not UTF-8, a damaged or scanned PDF, HTML without main text) is
    appended to `unreadable` with its reason and the rest are still loaded; without a list, it
    is an InvalidInput naming the file and the reason. `ahead`: readers of large JSONL files started
    before (jsonl_reader.ReadAhead).
    """
    for path, source_id in _files(paths, images):
        try:
            yield from _load_file(path, source_id, ahead)
        except Unreadable as exc:
            if unreadable is None:
                raise InvalidInput(f"cannot ingest {str(path)!r}: {exc.reason}") from None
            unreadable.append(Unread(str(path), exc.reason))


def check_paths(paths: Sequence[Path]) -> None:
    """InvalidInput naming the first path that does not exist or has a suffix ingest does not read."""
    for _ in _files(paths):
        pass


def count_documents(paths: Sequence[Path], *, images: bool = False) -> int:
    """How many documents `load_paths` will yield at most (files, plus lines of JSONL files):
    the total of a progress bar, found without parsing anything."""
    total = 0
    for path, _ in _files(paths, images):
        if path.suffix.lower() in JSONL_SUFFIXES:
            with path.open("rb") as handle:
                total += sum(1 for line in handle if line.strip())
        else:
            total += 1
    return total


def _files(paths: Sequence[Path], images: bool = False) -> Iterator[tuple[Path, str]]:
    """(file, source id) for every supported file; other suffixes inside a directory are not documents."""
    walked = IMAGE_SUFFIX_SET if images else DOCUMENT_SUFFIXES
    for path in paths:
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in walked):
                yield file, file.relative_to(path).as_posix()
        elif path.is_file():
            if path.suffix.lower() not in SUPPORTED:
                raise InvalidInput(f"cannot ingest {str(path)!r}: suffix {path.suffix!r} is not supported; "
                                   f"allowed: {allowed(SUPPORTED)}")
            yield path, path.name
        else:
            raise InvalidInput(f"cannot ingest {str(path)!r}: no such file or directory")


def _load_file(path: Path, source_id: str, ahead: jsonl_reader.ReadAhead | None = None) -> Iterator[Document]:
    if path.suffix.lower() in JSONL_SUFFIXES:
        yield from load_jsonl(path, ahead)
        return
    if path.suffix.lower() in IMAGE_SUFFIX_SET:
        yield load_image(path, source_id)
        return
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise Unreadable(f"cannot read the file ({exc.strerror or exc})") from None
    # Relative to the folder ingest was given (the source id), never the server's absolute path:
    # readers see it, and the same folder ingested from another checkout keeps its content hashes.
    yield document_from_bytes(path.name, data, source_id, source_path=source_id)


def document_from_bytes(name: str, data: bytes, source_id: str, source_path: str = "") -> Document:
    """One file's document, chosen by the suffix of `name` (a path's or an uploaded file's);
    Unreadable says why a file gives none."""
    suffix = Path(name).suffix.lower()
    if suffix in PDF_SUFFIXES or suffix in HTML_SUFFIXES:
        extracted = read_pdf(data) if suffix in PDF_SUFFIXES else read_html(data)
        return document_from_extracted(name, extracted, source_id, source_path)
    fallback = _fallback_title(name)
    if suffix not in TEXT_SUFFIXES:
        raise Unreadable(f"suffix {suffix!r} is not supported; allowed: {allowed(SUPPORTED - JSONL_SUFFIXES)}")
    text = read_text(data)
    heading = _HEADING.search(text)
    return Document(source_id=source_id, text=text, title=heading.group(1) if heading else fallback,
                    source_path=source_path)


def document_from_extracted(name: str, extracted: Extracted, source_id: str, source_path: str = "") -> Document:
    """A PDF's or HTML file's document from its extracted text (parsed here or in a parse worker)."""
    return Document(source_id=source_id, text=extracted.text, title=extracted.title or _fallback_title(name),
                    source_path=source_path, pages=extracted.pages)


def _fallback_title(name: str) -> str:
    return Path(name).stem.replace("-", " ").replace("_", " ")


def load_jsonl(path: Path, ahead: jsonl_reader.ReadAhead | None = None) -> Iterator[Document]:
    """BEIR corpus lines: {"_id", "title", "text", "metadata"}; optional `url` and `path` are kept.
    Vectors come in one encoding per file (storage/vectors.py): lists of numbers, or base64 text."""
    encoding: tuple[VectorEncoding, int] | None = None  # the file's, and the line that set it
    for number, record, decoded, may_hold_bool in jsonl_reader.lines(path, ahead):
        try:
            if isinstance(record, bytes):  # orjson could not read it
                record = _parse_line(record)
            # Decoded: the reader checked every vector of the record with read_vector already.
            doc = document_from_mapping(record, may_hold_bool=may_hold_bool, vectors_checked=decoded is not None)
            if doc.chunks:
                found = decoded or _encoding(record)
                if encoding is None:
                    encoding = (found, number)
                elif found is not encoding[0]:
                    raise InvalidInput(f"document {doc.source_id!r} gives its vectors as {found}, and line "
                                       f"{encoding[1]} as {encoding[0]}; allowed: one encoding per file, lists "
                                       "of numbers or base64 text")
            # A line's source is the record, not the file holding it: the file path is not
            # stored (nor hashed), so moving or renaming the JSONL file re-embeds nothing.
            yield doc
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path}:{number}: not UTF-8 (byte {exc.object[exc.start]:#04x} at offset "
                               f"{exc.start}); allowed: UTF-8 JSON lines") from None
        except InvalidInput as exc:
            raise InvalidInput(f"{path}:{number}: {exc.message}") from None


def _parse_line(line: bytes) -> Any:
    """orjson first (a line of vectors parses several times faster); what it refuses and `json` reads
    (NaN, lone surrogates) is read by `json` as before, and a line neither reads is json's error."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def document_from_mapping(record: Any, source_path: str = "", *, may_hold_bool: bool = True,
                          vectors_checked: bool = False) -> Document:
    """A document from a BEIR-style record. With precomputed vectors: `chunks` (a list of {"text",
    "vector", optional "parent"}), or `vector` beside `text` for a document that is one chunk; each
    vector a list of numbers or base64 text of little-endian float32 (one encoding per document).
    `may_hold_bool=False`: the record's JSON had no boolean (storage/vectors.py, parse_vector).
    `vectors_checked`: the record's vectors are `jsonl_reader.Stored` (read, checked, scaled and hashed)."""
    if not isinstance(record, dict):
        raise InvalidInput(f"expected a JSON object, got {type(record).__name__}")
    source_id = record.get("_id", record.get("id"))
    if not isinstance(source_id, str) or not source_id:
        raise InvalidInput(f"'_id' must be a non-empty string, got {source_id!r}")
    chunks = _vector_chunks(record, source_id, may_hold_bool, vectors_checked)
    if "chunks" in record and record.get("text"):
        raise InvalidInput(f"document {source_id!r}: give 'text' (cut by the gateway, or one chunk with 'vector') "
                           "or 'chunks', not both")
    text = record.get("text", "" if "chunks" in record else None)
    if not isinstance(text, str):
        raise InvalidInput(f"document {source_id!r}: 'text' must be a string, got {type(text).__name__}")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidInput(f"document {source_id!r}: 'metadata' must be an object, got {type(metadata).__name__}")
    title = record.get("title") or ""
    url = record.get("url") or record.get("source_url") or ""
    path = record.get("path") or record.get("source_path") or source_path
    return Document(source_id=source_id, text=text, title=str(title), metadata=metadata,
                    source_path=str(path), source_url=str(url), chunks=chunks)


def _encoding(record: dict[str, Any]) -> VectorEncoding | None:
    """The encoding of a record's vectors (all one: `_vector_chunks` checked)."""
    chunks = record.get("chunks")
    return VectorEncoding.of(record["vector"] if chunks is None else chunks[0].get("vector"))


def _vector_chunks(record: dict[str, Any], source_id: str, may_hold_bool: bool = True,
                   checked: bool = False) -> tuple[VectorChunk, ...]:
    chunks, vector = record.get("chunks"), record.get("vector")
    if chunks is None and vector is None:
        return ()
    where = f"document {source_id!r}"
    if chunks is not None and vector is not None:
        raise InvalidInput(f"{where}: give 'vector' (the document is one chunk) or 'chunks', not both")
    if vector is not None:
        text = record.get("text")
        if not isinstance(text, str):
            raise InvalidInput(f"{where}: 'vector' needs 'text' (the one chunk's text), got {type(text).__name__}")
        if checked:
            return (VectorChunk(text, vector.vector, digest=vector.digest),)
        return (VectorChunk(text, read_vector(vector, f"vector of {where}", may_hold_bool=may_hold_bool)),)
    if not isinstance(chunks, list):
        raise InvalidInput(f"{where}: 'chunks' must be a list of {{text, vector, parent}}, got {type(chunks).__name__}")
    parsed = []
    first: VectorEncoding | None = None
    for index, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise InvalidInput(f"{where}: chunks[{index}] must be an object with a string 'text'")
        parent = chunk.get("parent")
        if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int)):
            raise InvalidInput(f"{where}: parent of chunks[{index}] must be an integer, got {parent!r}")
        value = chunk.get("vector")
        encoding = VectorEncoding.of(value)
        if index == 0:
            first = encoding
        elif encoding is not None and first is not None and encoding is not first:
            raise InvalidInput(f"{where}: the vector of chunks[{index}] is {encoding}, and that of chunks[0] "
                               f"{first}; allowed: one encoding per file, lists of numbers or base64 text")
        if checked:
            parsed.append(VectorChunk(chunk["text"], value.vector, parent, value.digest))
            continue
        vector = read_vector(value, f"vector of {where} chunks[{index}]", may_hold_bool=may_hold_bool)
        parsed.append(VectorChunk(chunk["text"], vector, parent))
    return tuple(parsed)


# -- images (png, jpg) ---------------------------------------------------------------------

def load_image(path: Path, source_id: str) -> Document:
    """An image source: the file's bytes, captioned by a `<name>.txt` beside it when there is one
    (`red-square.png` + `red-square.png.txt`), else by its file name. The caption is the hit's
    content and what citations quote; the vector is the image's (ingest decodes and checks it).
    """
    size = path.stat().st_size
    if size > MAX_IMAGE_BYTES:
        raise InvalidInput(f"cannot ingest {str(path)!r}: {size} bytes; at most {MAX_IMAGE_BYTES} per image")
    title = path.stem.replace("-", " ").replace("_", " ")
    sidecar = path.with_name(path.name + ".txt")
    caption = sidecar.read_text(encoding="utf-8").strip() if sidecar.is_file() else title
    return Document(source_id=source_id, text=caption, title=title, source_path=source_id,
                    image=path.read_bytes())
