"""Page tokens for list calls: opaque to clients, the last key returned."""

from __future__ import annotations

import base64
import bisect
from collections.abc import Callable, Sequence
from typing import TypeVar

from controller.errors import FieldError

T = TypeVar("T")
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class PageError(FieldError):
    context = "request"


def page(items: Sequence[T], page_size: int, token: str, key: Callable[[T], str]) -> tuple[list[T], str]:
    """`items` sorted by `key`; returns one page and the token for the next ('' at the end)."""
    if page_size < 0 or page_size > MAX_PAGE_SIZE:
        raise PageError(
            "page_size", f"{page_size} is out of range", f"0 (default {DEFAULT_PAGE_SIZE}) to {MAX_PAGE_SIZE}"
        )
    size = page_size or DEFAULT_PAGE_SIZE
    after = ""
    if token:
        try:
            after = base64.urlsafe_b64decode(token.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            raise PageError("page_token", "is not a token this server issued", "a next_page_token, or empty") from None
    first = bisect.bisect_right([key(item) for item in items], after) if after else 0
    chunk = list(items[first : first + size])
    more = first + size < len(items)
    return chunk, base64.urlsafe_b64encode(key(chunk[-1]).encode()).decode() if more and chunk else ""
