"""Collective patterns -> the flows they put on the fabric. Pure.

Servers are taken in (pod, index) order so a ring crosses each pod boundary
once per direction; flows run between same-rail NICs (rail-aligned ranks),
which is what a rail-optimized fabric carries.
"""

from __future__ import annotations

from typing import Sequence

from controller.fabric import NicId
from controller.te.jobs import JobFlow, Pattern

ServerKey = tuple[int, int]  # (pod, server index)


def pattern_flows(pattern: Pattern, servers: Sequence[ServerKey], rails: int, demand_bps: float) -> list[JobFlow]:
    ordered = sorted(servers)
    m = len(ordered)
    if m < 2:
        return []  # one server: the collective stays inside it (NVLink)
    if pattern is Pattern.RING:
        pairs = [(i, (i + 1) % m) for i in range(m)] if m > 2 else [(0, 1), (1, 0)]
    elif pattern is Pattern.TREE:
        pairs = [pair for child in range(1, m) for pair in ((child, (child - 1) // 2), ((child - 1) // 2, child))]
    else:
        pairs = [(i, j) for i in range(m) for j in range(m) if i != j]
    return [
        JobFlow(NicId(rail, *ordered[i]), NicId(rail, *ordered[j]), demand_bps)
        for rail in range(rails)
        for i, j in pairs
    ]
