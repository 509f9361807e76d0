"""Collective patterns -> the flows they put on the fabric. Pure.

Servers are taken in (pod, index) order so a ring crosses each pod boundary
once (and, pods being numbered cluster by cluster, each cluster boundary
once), and trees are built per pod, then across the pod roots of each
cluster, then across the cluster roots; flows run
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
    pods_per_cluster: int = 0,
) -> list[JobFlow]:
    """`rails`: the job's rails on every server (an int n: rails 0..n-1).
    `pods_per_cluster`: a three-tier fabric's, so a tree crosses the core once
    per cluster it spans (0: one cluster).
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
        edges = _tree_edges(ordered, pods_per_cluster)
        pairs = [pair for child, parent in edges for pair in ((child, parent), (parent, child))]
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


def _tree_edges(ordered: Sequence[ServerKey], pods_per_cluster: int = 0) -> list[tuple[int, int]]:
    """A topology-aware tree (as NCCL builds them): a binary tree inside each
    pod, one over the pods' roots in each cluster, and one over the clusters'
    roots, so only pods-1 tree edges cross the spines instead of nearly all of
    them, and only clusters-1 cross the core."""
    by_pod: dict[int, list[int]] = {}
    for index, (pod, _) in enumerate(ordered):
        by_pod.setdefault(pod, []).append(index)
    edges = [edge for members in by_pod.values() for edge in _binary_tree(members)]
    by_cluster: dict[int, list[int]] = {}
    for pod, members in sorted(by_pod.items()):
        by_cluster.setdefault(pod // pods_per_cluster if pods_per_cluster else 0, []).append(members[0])
    edges += [edge for roots in by_cluster.values() for edge in _binary_tree(roots)]
    return edges + _binary_tree([roots[0] for _, roots in sorted(by_cluster.items())])
