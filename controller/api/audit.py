"""The audit log: one JSON line per mutation (refused ones too, even when
its bytes did not decode) and per telemetry stream, for whoever must answer
"who drained rys3 at 02:14?". Refused calls are audited a few per caller
per minute, with a count of those held back (refusals.py): a flood of them
must not grow the file without bound. Lines are appended to a file (rotate
it with logrotate's `copytruncate`: the daemon keeps it open) or go to
stderr (the journal, under systemd).

    {"time": "2026-11-23T02:14:05.123Z", "identity": "alice", "role": "operator",
     "method": "DrainSwitch", "object": "switch rys3", "request_id": "", "code": "OK"}
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import threading
from pathlib import Path
from typing import TextIO

# What each mutation acts on: the request's fields that name it.
MUTATIONS = {
    "PlaceJob": ("job", "job_id"),
    "ReleaseJob": ("job", "job_id"),
    "DrainLink": ("link", "link"),
    "UndrainLink": ("link", "link"),
    "DrainSwitch": ("switch", "switch"),
    "UndrainSwitch": ("switch", "switch"),
    "PinFlow": ("pin", "pin.name"),
    "UnpinFlow": ("pin", "name"),
}


SELF_AUDITED = frozenset({"ReportTelemetry"})  # one line per stream, written by its servicer


def _field(request, path: str) -> str:
    value = request
    for part in path.split("."):
        value = getattr(value, part, "")
    return str(value)[:200]


class AuditLog:
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    @classmethod
    def open(cls, where: str) -> AuditLog:
        """`-`: stderr; otherwise a file, appended to (created 0600)."""
        if where == "-":
            return cls(sys.stderr)
        path = Path(where)
        path.touch(mode=0o600, exist_ok=True)
        return cls(path.open("a", encoding="utf-8", buffering=1))

    def record(
        self,
        *,
        identity: str | None,
        role: str | None,
        method: str,
        code: str,
        request=None,
        peer: str = "",
        held_back: int = 0,
        records: int | None = None,
    ) -> None:
        """One line. `peer`: the client's address, for a refusal; `held_back`:
        the caller's refusals not audited since its last line (refusals.py);
        `records`: what a telemetry stream delivered."""
        kind, field = MUTATIONS.get(method, ("", ""))
        line: dict[str, object] = {
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "identity": identity or "",
            "role": role or "",
            "method": method,
            "object": f"{kind} {_field(request, field)}" if request is not None and field else "",
            "request_id": _field(request, "request_id") if request is not None and method == "PlaceJob" else "",
            "code": code,
        }
        if peer:
            line["peer"] = peer[:64]
        if held_back:
            line["held_back"] = held_back
        if records is not None:
            line["records"] = records
        with self._lock:
            self._out.write(json.dumps(line, sort_keys=False) + "\n")
            self._out.flush()


def is_mutation(method: str) -> bool:
    return method in MUTATIONS
