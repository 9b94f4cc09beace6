"""What a client-chosen id may be: checked once, where it enters (GraphQL, ingest, CLI).

A source id becomes part of a row's primary key and is compared in expressions, so it must be
text that every engine stores, prints and matches exactly: printable characters only. An id
with a control or format character could be stored but never read back or deleted (milvus-lite's
lexer knows only a few escapes), and one with a lone surrogate cannot even be sent over gRPC.
"""

from __future__ import annotations

from gateway.errors import InvalidInput

# Long enough for a URL or a path, short enough that namespace/sourceId/chunkId stays within the
# 1,024-character primary key (storage/schema.py MAX_ID).
MAX_SOURCE_ID_CHARS = 512


def check_source_id(value: str) -> str:
    """Return `value` if it is a usable source id, else raise InvalidInput naming the problem."""
    if not value or not value.strip():
        raise InvalidInput("sourceId is empty; send 1 to 512 printable characters")
    if len(value) > MAX_SOURCE_ID_CHARS:
        raise InvalidInput(f"sourceId {value[:40]!r}... is {len(value)} characters; "
                           f"at most {MAX_SOURCE_ID_CHARS} are allowed")
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None:
        raise InvalidInput(f"sourceId {_shown(value)} contains the non-printable character U+{ord(bad):04X}; "
                           "allowed: printable characters (no control, format, surrogate or line-separator "
                           "characters)")
    return value


def relative_source_path(stored: str, source_id: str) -> str:
    """The path a reader is shown: never the server's file system layout.

    Ingest stores paths relative to the folder it was given (`guides/setup.md`, the source id).
    A row written before that holds an absolute path: it is shown from the source id on
    (`/srv/corpora/acme/docs/guides/setup.md` with source id `guides/setup.md` as
    `guides/setup.md`), else as its file name. A relative path is shown as stored.
    """
    path = stored.replace("\\", "/")
    absolute = path.startswith("/") or (len(path) > 2 and path[1] == ":" and path[2] == "/")
    if not absolute:
        return stored
    if source_id and path.endswith("/" + source_id):
        return source_id
    return path.rsplit("/", 1)[-1]


def _shown(value: str) -> str:
    """The id for a message: escaped so the message itself is printable and bounded."""
    return ascii(value[:80])
