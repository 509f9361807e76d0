"""Page tokens for list calls: opaque to clients, and bound to the call.

A token carries the last key returned and the call it was issued for (the
method and its filter), with a checksum: a token from another method or
another filter, or one made up, is refused as INVALID_ARGUMENT instead of
silently starting somewhere. Nothing secret is needed: a token is a cursor,
and forging one only pages through what the caller may list anyway. Tokens
stay valid across restarts and replicas.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TypeVar

from controller.errors import FieldError

T = TypeVar("T")
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_CHECK = b"railyard page token v1"


class PageError(FieldError):
    context = "request"


def _digest(payload: bytes) -> str:
    return hashlib.blake2b(payload, key=_CHECK, digest_size=8).hexdigest()


def encode_token(scope: str, after: str) -> str:
    payload = json.dumps([scope, after], separators=(",", ":")).encode()
    return f"{base64.urlsafe_b64encode(payload).decode()}.{_digest(payload)}"


def decode_token(scope: str, token: str) -> str:
    """The last key of the previous page, if `token` was issued for `scope`."""
    body, _, check = token.partition(".")
    try:
        payload = base64.urlsafe_b64decode(body.encode())
        issued_for, after = json.loads(payload)
    except (ValueError, UnicodeDecodeError, TypeError):
        issued_for, after, payload = None, "", b""
    if issued_for is None or check != _digest(payload) or not isinstance(after, str):
        raise PageError("page_token", "is not a token this server issued", "a next_page_token, or empty")
    if issued_for != scope:
        raise PageError(
            "page_token",
            "was issued for another call (another method, or other filters)",
            "the next_page_token of this same call with the same filters, or empty",
        )
    return after


def page(
    items: Sequence[T],
    page_size: int,
    token: str,
    key: Callable[[T], str],
    scope: str,
    default: int = DEFAULT_PAGE_SIZE,
    most: int = MAX_PAGE_SIZE,
) -> tuple[list[T], str]:
    """`items` sorted by `key`; returns one page and the token for the next
    ('' at the end). `scope`: the method and its filters, which a token must match."""
    if page_size < 0 or page_size > most:
        raise PageError("page_size", f"{page_size} is out of range", f"0 (default {default}) to {most}")
    size = page_size or default
    after = decode_token(scope, token) if token else ""
    first = bisect.bisect_right([key(item) for item in items], after) if after else 0
    chunk = list(items[first : first + size])
    more = first + size < len(items)
    return chunk, encode_token(scope, key(chunk[-1])) if more and chunk else ""
