"""What every command prints, and where it writes: tables for people, JSON for
scripts (one object where the answer is one thing, zero values kept), files
written with a one-line error instead of a traceback."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.errors import FieldError


class CliError(FieldError):
    """A command-line option (or the command) that cannot be used as given:
    `field` is the option, e.g. `--out`."""

    def __init__(self, field: str, problem: str, allowed: str = "") -> None:
        super().__init__(field, problem, allowed)
        self.args = (f"{field}: {problem}" + (f"; allowed: {allowed}" if allowed else ""),)


def as_dict(message) -> dict:
    """A protobuf message as JSON-ready data: proto field names, and every
    field, zeros and empty lists too, so a script reads rank 0 and pod 0 like
    any other value."""
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True)


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=False)
    print()


def print_table(rows: Sequence[Mapping[str, Any]]) -> None:
    if not rows:
        print("(none)")
        return
    cols = list(rows[0])
    cells = [[_cell(row[c]) for c in cols] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def emit(as_json: bool, data: Any, text: Callable[[], None]) -> None:
    """`data` as JSON, or `text()` for a person."""
    if as_json:
        print_json(data)
    else:
        text()


def write_file(path: str | Path, text: str, flag: str) -> Path:
    """`text` into `path`; a path that cannot be written is the flag's error, in one line."""
    path = Path(path)
    try:
        path.write_text(text)
    except OSError as exc:
        raise CliError(f"--{flag}", f"cannot write {path}: {exc.strerror or exc}", "a writable file path") from None
    return path


def writable_dir(path: str | Path, flag: str) -> Path:
    """`path` as a directory this process could write into, checked before a
    long run rather than at its end, and without making it: a run refused
    later leaves nothing behind."""
    path = Path(path)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        problem = f"{existing} is not a directory"
    elif not os.access(existing, os.W_OK | os.X_OK):
        problem = f"{existing} is not writable"
    else:
        return path
    raise CliError(f"--{flag}", f"cannot write into {path}: {problem}", "a writable directory")
