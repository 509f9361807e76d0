"""Every error Railyard raises on purpose, under one root, `RailyardError`,
each class with the gRPC status it means to a caller (`status`): the API
answers with it, and nothing else maps exceptions to codes.

The one shape of a user-facing input error is `FieldError`: which field,
what was wrong, what is allowed. Nothing that raises one has changed any
state. No class has a built-in base besides Exception: catch them by their
own names (no caller needs one as a ValueError or a KeyError).

Pure and the lowest layer: the status is named here (google.rpc.Code's names,
which grpc.StatusCode shares), and the API layer turns it into gRPC's.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import Enum
from typing import ClassVar

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


class Status(Enum):
    """The canonical status an error means to an API caller: google.rpc.Code,
    by the names grpc.StatusCode gives them."""

    INVALID_ARGUMENT = 3
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    INTERNAL = 13
    UNAVAILABLE = 14


class RailyardError(Exception):
    """The root. INTERNAL, unless a subclass says what the caller did or can
    do: an INTERNAL error is a fault of the host or a bug, logged with its
    traceback and answered without its text."""

    status: ClassVar[Status] = Status.INTERNAL


class FieldError(RailyardError):
    """`field` is the dotted path of the offending input."""

    status = Status.INVALID_ARGUMENT
    context = "request"

    def __init__(self, field: str, problem: str, allowed: str = "") -> None:
        self.field = field
        self.problem = problem
        self.allowed = allowed
        text = f"{self.context}: '{field}': {problem}"
        if allowed:
            text += f"; allowed: {allowed}"
        super().__init__(text)


class NotFound(RailyardError):
    """A named object (pin, job, switch) does not exist."""

    status = Status.NOT_FOUND


class RevisionGone(RailyardError):
    """A watch asked to start from a revision the history no longer holds: list again."""

    status = Status.OUT_OF_RANGE


class PermissionDenied(RailyardError):
    """The caller is known, but its grant does not cover this."""

    status = Status.PERMISSION_DENIED


class RateLimited(RailyardError):
    """The caller is over its rate; `retry_after_s` says when to try again."""

    status = Status.RESOURCE_EXHAUSTED

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Exhausted(RailyardError):
    """Something is full (the fabric's GPUs, the telemetry queue, the store's
    quota): retry later, or ask for less."""

    status = Status.RESOURCE_EXHAUSTED


class Conflict(RailyardError):
    """The request is well-formed but clashes with existing intent."""

    status = Status.FAILED_PRECONDITION


class AlreadyExists(Conflict):
    """An object with that name exists and the request is not a retry of the one that made it."""

    status = Status.ALREADY_EXISTS


class NotLeader(RailyardError):
    """This replica does not lead: mutations go to the leader (the leader's
    address in the message and in the railyard-leader trailer)."""

    status = Status.FAILED_PRECONDITION

    def __init__(self, leader: str) -> None:
        where = f"the leader is at {leader}" if leader else "no replica leads right now; retry shortly"
        super().__init__(f"this controller replica does not lead, so it does not change intent: {where}")
        self.leader = leader


class HostError(RailyardError):
    """The host cannot do this now (Open vSwitch not running, a namespace
    gone): said in one line by the CLI, never as a traceback."""
