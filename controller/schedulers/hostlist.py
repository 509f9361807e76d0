"""Slurm's hostlist expressions (`gpu-a[001-004,007]`): how its configuration
files and commands name sets of nodes."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBERED = re.compile(r"(.*?)(\d+)")


def compress(names: Iterable[str]) -> str:
    """`names` as one hostlist expression: names that differ only in a
    trailing number of as many digits share brackets."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in dict.fromkeys(names):  # once each, in order
        match = _NUMBERED.fullmatch(name)
        if match is None:
            plain.append(name)
            continue
        prefix, digits = match.groups()
        # Grouped by digit count, so every number keeps its zero padding.
        groups.setdefault((prefix, len(digits)), []).append(int(digits))
    parts = []
    for (prefix, width), numbers in groups.items():
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        parts.append(f"{prefix}[{','.join(_ranges(sorted(set(numbers)), width))}]")
    return ",".join(parts + plain)


def _ranges(numbers: list[int], width: int) -> list[str]:
    out, start = [], numbers[0]
    for previous, current in zip(numbers, [*numbers[1:], None]):
        if current is not None and current == previous + 1:
            continue
        out.append(f"{start:0{width}d}" if start == previous else f"{start:0{width}d}-{previous:0{width}d}")
        if current is not None:
            start = current
    return out
