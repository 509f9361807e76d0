"""The one shape of a user-facing input error: which field, what was wrong,
what is allowed. The API layer maps it to INVALID_ARGUMENT and friends; the
CLI prints it. Nothing that raises it has changed any state."""

from __future__ import annotations

import datetime as dt
import re

# Names of intent objects (pins, jobs): safe in logs, URLs and label values.
# Matched whole (fullmatch): with `match` and `$`, "ok\n" passed.
NAME_PATTERN = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
NAME_RULE = "1-63 characters of a-z, 0-9, '.', '_', '-', starting and ending with a letter or digit"
SHOWN_CHARS = 64  # of a rejected value, in an error message


def iso_time(epoch_s: float) -> str:
    """A wall-clock time for a message: RFC 3339 in UTC, to the millisecond."""
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def valid_name(name: str) -> bool:
    return NAME_PATTERN.fullmatch(name) is not None


def shown(value: str) -> str:
    """A user's value quoted for an error message, cut short: a 1 MB id echoed
    back would not fit the reply's trailers."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"


class FieldError(ValueError):
    """`field` is the dotted path of the offending input."""

    context = "request"

    def __init__(self, field: str, problem: str, allowed: str = "") -> None:
        self.field = field
        self.problem = problem
        self.allowed = allowed
        text = f"{self.context}: '{field}': {problem}"
        if allowed:
            text += f"; allowed: {allowed}"
        super().__init__(text)


class NotFound(LookupError):
    """A named object (pin, job, switch) does not exist."""


class RevisionGone(LookupError):
    """A watch asked to start from a revision the history no longer holds (OUT_OF_RANGE): list again."""


class PermissionDenied(Exception):
    """The caller is known, but its grant does not cover this (PERMISSION_DENIED)."""


class RateLimited(Exception):
    """The caller is over its rate (RESOURCE_EXHAUSTED); `retry_after_s` says when to try again."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Conflict(Exception):
    """The request is well-formed but clashes with existing intent (FAILED_PRECONDITION)."""


class AlreadyExists(Conflict):
    """An object with that name exists and the request is not a retry of the one that made it."""


class NotLeader(Exception):
    """This replica does not lead: mutations go to the leader (FAILED_PRECONDITION,
    the leader's address in the message and in the railyard-leader trailer)."""

    def __init__(self, leader: str) -> None:
        where = f"the leader is at {leader}" if leader else "no replica leads right now; retry shortly"
        super().__init__(f"this controller replica does not lead, so it does not change intent: {where}")
        self.leader = leader


class HostError(RuntimeError):
    """The host cannot do this now (Open vSwitch not running, a namespace
    gone): said in one line by the CLI, never as a traceback."""
