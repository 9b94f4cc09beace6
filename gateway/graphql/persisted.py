"""Automatic persisted queries (Apollo's protocol) and a tenant's operation allow-list.

A client sends `extensions.persistedQuery = {version: 1, sha256Hash}` without the query; when
this process knows the hash for the caller's tenant, the query is filled in and the request runs
as if it had been sent in full. When it does not, PERSISTED_QUERY_NOT_FOUND tells the client to
send the query once more with the hash, which registers it (after checking the hash).

Registrations live in one bounded LRU per tenant per process: a tenant can never find out, by
timing or by a hit, which documents another tenant sent, nor push them out. A tenant past its
share (`per_tenant` entries, `tenant_chars` characters) evicts its own least recently used; when
the process total (`max_entries`, `max_chars`) is reached, the tenant holding the most gives way,
so a tenant holding no more than the others is never evicted by another's registrations. With
several workers each keeps its own; a miss costs one more round trip, as the protocol intends.

A tenant with `operations: {allow_only_listed: true, manifest: FILE}` accepts only the documents
of its manifest (docs/http.md): by hash, or in full when the full text is listed; APQ
registration of anything else is refused with OPERATION_NOT_ALLOWED.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.errors import (
    ConfigError,
    InvalidInput,
    OperationNotAllowed,
    PersistedQueryNotFound,
    PersistedQueryNotSupported,
)

# Apollo's persisted-query protocol has had one version since 2018.
PROTOCOL_VERSION = 1
# Registered documents' characters per process and per tenant: a document can be up to the body
# limit, so a count alone would let one client pin hundreds of MB.
MAX_CACHED_CHARS = 8 * 1024 * 1024
MAX_TENANT_CHARS = 2 * 1024 * 1024


def sha256_hex(document: str) -> str:
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class OperationList:
    """A tenant's manifest: sha256 hex of each listed document -> the document."""

    documents: Mapping[str, str]
    only_listed: bool
    source: str

    @classmethod
    def load(cls, path: Path, *, only_listed: bool) -> OperationList:
        """Read a manifest: `{hash: document}` (GraphQL Code Generator's persisted documents) or
        Apollo's `{"format": "apollo-persisted-query-manifest", "operations": [{id, body}]}`."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"operation manifest {path} cannot be read: {exc}") from None
        if isinstance(raw, dict) and raw.get("format") == "apollo-persisted-query-manifest":
            entries = [(op.get("id"), op.get("body")) for op in raw.get("operations", []) if isinstance(op, dict)]
        elif isinstance(raw, dict):
            entries = list(raw.items())
        else:
            raise ConfigError(f"operation manifest {path} must be a JSON object: {{sha256: document}} or an "
                              "apollo-persisted-query-manifest")
        documents: dict[str, str] = {}
        for key, body in entries:
            if not isinstance(key, str) or not isinstance(body, str):
                raise ConfigError(f"operation manifest {path}: entry {key!r} must map a sha256 hex string to "
                                  "a GraphQL document string")
            actual = sha256_hex(body)
            if key.lower() != actual:
                raise ConfigError(f"operation manifest {path}: entry {key!r} is not the sha256 of its "
                                  f"document (that is {actual})")
            documents[actual] = body
        return cls(documents=documents, only_listed=only_listed, source=str(path))


@dataclass
class _Share:
    """One tenant's registrations, least recently used first."""

    entries: OrderedDict[str, str] = field(default_factory=OrderedDict)
    chars: int = 0

    def add(self, digest: str, query: str) -> None:
        self.entries[digest] = query
        self.chars += len(query)

    def evict_oldest(self) -> None:
        _, evicted = self.entries.popitem(last=False)
        self.chars -= len(evicted)


@dataclass
class PersistedQueries:
    """Resolves a request's query from its persisted-query hash; one instance per process.

    `max_entries` and `max_chars` bound the process, `per_tenant` (default: `max_entries`) and
    `tenant_chars` each tenant's share.
    """

    max_entries: int
    lists: Mapping[str, OperationList] = field(default_factory=dict)
    max_chars: int = MAX_CACHED_CHARS
    per_tenant: int | None = None
    tenant_chars: int = MAX_TENANT_CHARS
    _shares: dict[str, _Share] = field(default_factory=dict, repr=False)
    _entries: int = 0
    _chars: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def resolve(self, tenant: str, request: dict[str, Any]) -> bool:
        """Fill in `request["query"]` from its hash, or register it; True when the query was filled in.

        Raises PersistedQueryNotFound / NotSupported (the client retries with the full query),
        InvalidInput (a malformed extension, or a hash that is not the query's), and
        OperationNotAllowed (the tenant only accepts its manifest).
        """
        listed = self.lists.get(tenant)
        extensions = request.get("extensions")
        extension = extensions.get("persistedQuery") if isinstance(extensions, dict) else None
        query = request.get("query")
        if extension is None:
            if listed is not None and listed.only_listed and isinstance(query, str):
                self._check_listed(listed, sha256_hex(query), tenant)
            return False
        digest = _digest(extension)
        if isinstance(query, str):
            actual = sha256_hex(query)
            if actual != digest:
                raise InvalidInput(f"persistedQuery.sha256Hash {digest} is not the sha256 of the query sent "
                                   f"(that is {actual}); send the hex SHA-256 of the query's UTF-8 text")
            if listed is not None and listed.only_listed:
                self._check_listed(listed, digest, tenant)
            elif self.max_entries > 0:
                self._register(tenant, digest, query)
            return False
        if query is not None:
            return False  # the body checks name a non-string query
        found = listed.documents.get(digest) if listed is not None else None
        if found is None and listed is not None and listed.only_listed:
            self._check_listed(listed, digest, tenant)
        if found is None:
            found = self._lookup(tenant, digest)
        if found is None:
            if self.max_entries == 0:
                raise PersistedQueryNotSupported("automatic persisted queries are off on this gateway "
                                                 "(GATEWAY_PERSISTED_QUERIES=0); send the full query")
            raise PersistedQueryNotFound(f"persisted query {digest} is not registered for this tenant in "
                                         "this process; send it again with the full query to register it")
        request["query"] = found
        return True

    def _check_listed(self, listed: OperationList, digest: str, tenant: str) -> None:
        if digest not in listed.documents:
            raise OperationNotAllowed(f"operation {digest} is not in tenant '{tenant}''s operation manifest "
                                      f"({len(listed.documents)} listed); this tenant accepts only listed "
                                      "operations (operations.allow_only_listed)")

    def _lookup(self, tenant: str, digest: str) -> str | None:
        with self._lock:
            share = self._shares.get(tenant)
            found = share.entries.get(digest) if share is not None else None
            if found is not None:
                share.entries.move_to_end(digest)
            return found

    def _register(self, tenant: str, digest: str, query: str) -> None:
        per_tenant = self.max_entries if self.per_tenant is None else self.per_tenant
        if len(query) > min(self.max_chars, self.tenant_chars) or per_tenant == 0:
            return
        with self._lock:
            share = self._shares.setdefault(tenant, _Share())
            if digest in share.entries:
                share.entries.move_to_end(digest)
                return
            share.add(digest, query)
            self._entries, self._chars = self._entries + 1, self._chars + len(query)
            while len(share.entries) > per_tenant or share.chars > self.tenant_chars:
                self._evict(share)
            while self._entries > self.max_entries:
                self._evict(self._largest(tenant, lambda s: len(s.entries)))
            while self._chars > self.max_chars:
                self._evict(self._largest(tenant, lambda s: s.chars))

    def _evict(self, share: _Share) -> None:
        before = share.chars
        share.evict_oldest()
        self._entries, self._chars = self._entries - 1, self._chars - (before - share.chars)

    def _largest(self, registering: str, size: Callable[[_Share], int]) -> _Share:
        """The share that gives way when the process is full; a tie goes against the registering tenant."""
        _, share = max(self._shares.items(), key=lambda item: (size(item[1]), item[0] == registering))
        return share

    def __len__(self) -> int:
        return self._entries


def _digest(extension: object) -> str:
    if not isinstance(extension, dict):
        raise InvalidInput("extensions.persistedQuery must be an object {version: 1, sha256Hash: <hex>}")
    version = extension.get("version")
    if version != PROTOCOL_VERSION:
        raise InvalidInput(f"extensions.persistedQuery.version {version!r} is not supported; allowed: "
                           f"{PROTOCOL_VERSION}")
    digest = extension.get("sha256Hash")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
        raise InvalidInput(f"extensions.persistedQuery.sha256Hash {str(digest)[:80]!r} is not 64 hex characters")
    return digest.lower()
