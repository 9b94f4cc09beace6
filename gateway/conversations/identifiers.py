"""Client-chosen conversation and user ids, checked once where they enter (GraphQL).

Both are compared in Milvus expressions (through the filter compiler's `literal`) and a
conversation id is part of a turn's primary key, so they are short and made of a closed set of
characters: no quotes, slashes, spaces or control characters to escape or confuse.
"""

from __future__ import annotations

import hashlib
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


def stored_conversation_id(conversation_id: str, user_id: str | None) -> str:
    """The id a conversation's turns are stored under. A key bound to a user (api_keys[].user_id)
    has its own conversations: its ids get a suffix naming the user, in a character ("~") no
    client id may contain, so no other key of the tenant can name them and two users' ids never
    meet. The user id is hashed so the stored id stays within the field's 256 characters."""
    if user_id is None:
        return conversation_id
    return f"{conversation_id}~{hashlib.sha256(user_id.encode()).hexdigest()[:24]}"
