"""Checked reads of one value from a YAML mapping: the field named in every
refusal, with what is allowed."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from emulation.workload.model import WorkloadError

MAX_BYTES = 10**15
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?I?B)?\s*", re.IGNORECASE)
SIZE_FORMS = "a byte count: an integer, or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), up to 1 PB"


def kind_of(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def only(value: Mapping[str, Any], prefix: str, allowed: set[str]) -> None:
    for key in value:
        if key not in allowed:
            raise WorkloadError(f"{prefix}{key}", "unknown key", ", ".join(sorted(allowed)))


def number(
    doc: Mapping[str, Any],
    key: str,
    *,
    lower: float,
    upper: float,
    default: float | None = None,
    prefix: str = "",
    closed: bool = False,
) -> float:
    """A finite number in (lower, upper], or [lower, upper] if `closed`."""
    value = doc.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    inside = ok and (lower <= value if closed else lower < value) and value <= upper
    if not inside:
        bound = ">=" if closed else ">"
        raise WorkloadError(f"{prefix}{key}", f"got {value!r}", f"a number {bound} {lower:g} and <= {upper:g}")
    return float(value)


def integer(
    doc: Mapping[str, Any], key: str, default: int | None, *, lower: int, upper: int = 1 << 31, prefix: str = ""
) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lower <= value <= upper:
        raise WorkloadError(f"{prefix}{key}", f"got {value!r}", f"an integer from {lower} to {upper}")
    return value


def byte_count(doc: Mapping[str, Any], key: str, prefix: str = "") -> int:
    """Bytes, > 0: 1048576, "64GB" (10^9) or "1.5GiB" (2^30)."""
    value = doc.get(key)
    if isinstance(value, bool):
        count = None
    elif isinstance(value, int):
        count = value
    elif isinstance(value, str) and (m := _SIZE.fullmatch(value)):
        scaled = float(m.group(1)) * _UNITS[(m.group(2) or "").upper()]
        count = int(scaled) if math.isfinite(scaled) and scaled <= MAX_BYTES else None
    else:
        count = None
    if count is None or not 0 < count <= MAX_BYTES:
        raise WorkloadError(f"{prefix}{key}", f"got {value!r}", SIZE_FORMS)
    return count
