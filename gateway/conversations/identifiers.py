"""Client-chosen conversation and user ids, checked once where they enter (GraphQL).

Both are compared in Milvus expressions (through the filter compiler's `literal`) and a
conversation id is part of a turn's primary key, so they are short and made of a closed set of
characters: no quotes, slashes, spaces or control characters to escape or confuse.
"""

from __future__ import annotations

import re

from gateway.errors import InvalidInput

MAX_ID_CHARS = 128
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_RULE = "1 to 128 characters: letters, digits and . _ : @ -, starting with a letter or digit"


def check_conversation_id(value: str) -> str:
    """Return `value` if it is a usable conversation id, else raise InvalidInput naming it."""
    return _check("conversationId", value)


def check_user_id(value: str) -> str:
    return _check("userId", value)


def _check(name: str, value: str) -> str:
    if not _ID.fullmatch(value):
        raise InvalidInput(f"{name} {ascii(value[:80])} is not allowed; allowed: {_RULE}")
    return value
