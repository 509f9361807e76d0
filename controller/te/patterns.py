"""Collective patterns -> the flows they put on the fabric. Pure.

Servers are taken in (pod, index) order so a ring crosses each pod boundary
once, and trees are built per pod and then across pod roots; flows run
between same-rail NICs (rail-aligned ranks), which is what a rail-optimized
fabric carries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller.fabric import NicId
from controller.te.jobs import JobFlow, Pattern

ServerKey = tuple[int, int]  # (pod, server index)


def pattern_flows(
    pattern: Pattern,
    servers: Sequence[ServerKey],
    rails: int | Sequence[int],
    demand_bps: float,
    nics: Mapping[tuple[int, int, int], NicId] | None = None,
) -> list[JobFlow]:
    """`rails`: the job's rails on every server (an int n: rails 0..n-1).
    `nics`: (rail, pod, server) -> the fabric's own NicId, to share instead of
    making new ones (a placed job's flows live as long as the job: fewer
    objects for the garbage collector to walk)."""
    ordered = sorted(servers)
    m = len(ordered)
    if m < 2:
        return []  # one server: the collective stays inside it (NVLink)
    if pattern is Pattern.RING:
        pairs = [(i, (i + 1) % m) for i in range(m)] if m > 2 else [(0, 1), (1, 0)]
    elif pattern is Pattern.TREE:
        pairs = [pair for child, parent in _tree_edges(ordered) for pair in ((child, parent), (parent, child))]
    else:
        pairs = [(i, j) for i in range(m) for j in range(m) if i != j]
    out: list[JobFlow] = []
    for rail in range(rails) if isinstance(rails, int) else rails:
        ends = [NicId(rail, *key) for key in ordered]
        if nics is not None:
            ends = [nics.get(nic, nic) for nic in ends]
        out.extend(JobFlow(ends[i], ends[j], demand_bps) for i, j in pairs)
    return out


def _binary_tree(nodes: Sequence[int]) -> list[tuple[int, int]]:
    """(child, parent) edges of a heap-ordered binary tree over `nodes`."""
    return [(nodes[c], nodes[(c - 1) // 2]) for c in range(1, len(nodes))]


def _tree_edges(ordered: Sequence[ServerKey]) -> list[tuple[int, int]]:
    """A topology-aware tree (as NCCL builds them): a binary tree inside each
    pod, and one over the pods' roots, so only pods-1 tree edges cross the
    spines instead of nearly all of them."""
    by_pod: dict[int, list[int]] = {}
    for index, (pod, _) in enumerate(ordered):
        by_pod.setdefault(pod, []).append(index)
    edges = [edge for members in by_pod.values() for edge in _binary_tree(members)]
    return edges + _binary_tree([members[0] for _, members in sorted(by_pod.items())])
