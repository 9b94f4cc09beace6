"""Parse and validate each distinct GraphQL document once.

Clients send the same few documents over and over with different variables; parsing and
validating one took about 41% of the event-loop thread's time per search. A document's parse
and its validation errors depend only on its text, the token limit and the schema, so each is
computed once per tenant and text: the cost estimate reads the cached document before
admission, and Strawberry executes the same object. Entries are keyed by tenant as well, because
a document carries inline literals (query text): a cache shared across tenants would let one
tenant time whether another sent a given document. One bound covers all tenants.

The depth, alias and token limits are still decided for every request: they are validation
rules and a parse option whose outcome is a function of the text, and a cached outcome is that
same outcome. A document that fails to parse is not cached: Strawberry parses it again and
answers with the parse error as it always did.

What other readers derive from a document alone (the cost estimate's plan, graphql/cost.py; the
completion plans, graphql/completion.py) is kept with its entry (`derived`), so it is bounded,
per tenant and evicted with the document.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from graphql import DocumentNode, GraphQLError, GraphQLSchema, Node, parse, specified_rules
from graphql.validation import ASTValidationRule
from strawberry.extensions import MaxAliasesLimiter, QueryDepthLimiter, SchemaExtension
from strawberry.schema.schema import validate_document

# Bounds: distinct documents kept, and their total characters (a body may be up to 1 MiB, so a
# count alone would let a client pin hundreds of MB); a longer document is never cached.
MAX_DOCUMENTS = 512
MAX_CACHED_CHARS = 8 * 1024 * 1024
MAX_DOCUMENT_CHARS = 64 * 1024
# Values derived from one document (its cost plan, its completion plans: a few per object type and
# set of directive variables); past it, they are computed for each request.
MAX_DERIVED = 64
T = TypeVar("T")


@dataclass(slots=True)
class _Entry:
    document: DocumentNode
    errors: list[GraphQLError] | None = None  # None until validated
    # What other readers derive from the document alone (the cost estimate's plan), by their key.
    derived: dict[Any, Any] = field(default_factory=dict)


@dataclass
class DocumentCache:
    """A bounded LRU of parsed documents and their validation errors, safe across threads."""

    max_tokens: int
    rules: tuple[type[ASTValidationRule], ...]
    max_documents: int = MAX_DOCUMENTS
    max_chars: int = MAX_CACHED_CHARS
    _entries: OrderedDict[tuple[str, str], _Entry] = field(default_factory=OrderedDict, repr=False)
    _chars: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    hits: int = 0
    misses: int = 0

    def parse(self, text: str, *, tenant: str) -> DocumentNode:
        """The document for this text; raises GraphQLError (a syntax error or too many tokens)."""
        return self._entry((tenant, text)).document

    def validate(self, schema: GraphQLSchema, text: str, document: DocumentNode, *,
                 tenant: str) -> list[GraphQLError]:
        """Validation errors of a document with the gateway's rules, computed once per text."""
        with self._lock:
            entry = self._entries.get((tenant, text))
        if entry is None or entry.document is not document:  # not cached (too long, or evicted)
            return validate_document(schema, document, self.rules)
        if entry.errors is None:
            entry.errors = validate_document(schema, document, self.rules)  # same result if two race
        return entry.errors

    def derived(self, text: str, node: Node, key: Any, build: Callable[[], T], *, tenant: str) -> T:
        """`build()`, a function of the document alone (and of what `key` says), computed once per
        cached document and `key`: kept with the document, so bounded and evicted with it, and per
        tenant as it is. `node` is the document or one of its definitions, as the caller holds it."""
        with self._lock:
            entry = self._entries.get((tenant, text))
        if entry is None or not (entry.document is node or any(d is node for d in entry.document.definitions)):
            return build()  # not cached (too long, or evicted)
        try:
            return entry.derived[key]  # type: ignore[no-any-return]
        except KeyError:
            value = build()
            if len(entry.derived) < MAX_DERIVED:
                entry.derived[key] = value  # the same value if two race
            return value

    def _entry(self, key: tuple[str, str]) -> _Entry:
        text = key[1]
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry
            self.misses += 1
        entry = _Entry(parse(text, max_tokens=self.max_tokens))  # outside the lock: parsing is CPU work
        if len(text) > MAX_DOCUMENT_CHARS:
            return entry
        with self._lock:
            if key not in self._entries:
                self._entries[key] = entry
                self._chars += len(text)
                while len(self._entries) > self.max_documents or self._chars > self.max_chars:
                    (_, evicted), _ = self._entries.popitem(last=False)
                    self._chars -= len(evicted)
            return self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


def document_cache(max_tokens: int, max_depth: int, max_aliases: int) -> DocumentCache:
    """The cache with the hardening limits as validation rules (built once, so cache keys hold)."""
    rules = (*specified_rules,
             *QueryDepthLimiter(max_depth=max_depth).validation_rules,
             *MaxAliasesLimiter(max_alias_count=max_aliases).validation_rules)
    return DocumentCache(max_tokens=max_tokens, rules=tuple(rules))


def cached_documents(cache: DocumentCache) -> type[SchemaExtension]:
    """A schema extension that takes parse and validation from the cache."""

    class CachedDocuments(SchemaExtension):
        def on_parse(self) -> Iterator[None]:
            context = self.execution_context
            if context.graphql_document is None and context.query is not None:
                try:
                    context.graphql_document = cache.parse(context.query, tenant=_tenant(context))
                except (GraphQLError, RecursionError):
                    pass  # Strawberry parses it itself, inside its own error handling
            yield

        def on_validate(self) -> Iterator[None]:
            context = self.execution_context
            if context.pre_execution_errors is None and context.graphql_document is not None:
                errors = cache.validate(context.schema._schema, context.query or "", context.graphql_document,
                                        tenant=_tenant(context))
                context.pre_execution_errors = list(errors)
            yield

    return CachedDocuments


def _tenant(context: Any) -> str:
    return tenant_of(context.context)


def tenant_of(context: Any) -> str:
    """The caller's tenant from a request context; "" when the schema runs outside a request (tests,
    schema export)."""
    principal = getattr(context, "principal", None)
    return principal.tenant if principal is not None else ""
