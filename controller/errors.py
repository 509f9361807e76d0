"""The one shape of a user-facing input error: which field, what was wrong,
what is allowed. The API layer maps it to INVALID_ARGUMENT and friends; the
CLI prints it. Nothing that raises it has changed any state."""

from __future__ import annotations


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


class Conflict(Exception):
    """The request is well-formed but clashes with existing intent."""
