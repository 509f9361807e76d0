"""Clusters in placement, on a three-tier fabric: which cluster(s) a job's
servers come from, and how much of its collective crosses between them. Pure.

The core joining the clusters is thin (meta-32k's is 7:1 under its spines),
so it is where jobs would contend: a job that one cluster has room for is
kept inside one cluster, whatever the predicted utilization says about the
core while it is still idle. The cluster is chosen as the pods within it are,
best fit first: the fewest GPUs left free on the job's servers; then the
cluster with the fewest free GPUs (what is left free stays together in the
emptier clusters, for the jobs that need a whole one); then the least load
on its pods' uplinks; then the lowest number.

A job no cluster has room for spans as few clusters as can hold it, best fit
among those sets of clusters alike, and takes all it can from the cluster
with the most room, then the next: the more lopsided the split, the fewer
all-to-all pairs cross the core. Ranks run in (pod, server) order and pods
are numbered cluster by cluster, so each cluster's ranks are contiguous and
a ring over n clusters crosses the core n times on each rail (twice for
two), whatever the split. A tree is patterns.py's: per pod, over each
cluster's pod roots, then over the cluster roots, so it crosses the core
once for each cluster past the first, on each rail.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.fabric.spec import FabricSpec
from controller.te.jobs import JobFlow

__all__ = ["ClusterPlan", "ClusterView", "cross_cluster_share", "plan_clusters"]

# Beyond this many sets of n clusters, only the n-1 with the most room and
# each possible last one are tried: 16 clusters would otherwise be 12,870
# sets of 8 to weigh per rail set.
CLUSTER_SET_LIMIT = 256


@dataclass(frozen=True)
class ClusterView:
    """What the choice of clusters reads, per request: each cluster's free
    GPUs (any rail) and the load already on its pods' uplinks."""

    pods_per_cluster: int
    free_gpus: tuple[int, ...]  # by cluster
    uplink_bps: tuple[float, ...]  # by cluster

    @classmethod
    def of(
        cls, spec: FabricSpec, server_pods: np.ndarray, free_count: np.ndarray, pod_load: Mapping[int, float]
    ) -> ClusterView:
        ppc = spec.pods_per_cluster
        free = np.bincount(server_pods // ppc, weights=free_count, minlength=spec.clusters)
        load = [0.0] * spec.clusters
        for pod, bps in pod_load.items():
            load[pod // ppc] += bps
        return cls(ppc, tuple(int(n) for n in free), tuple(load))

    @property
    def clusters(self) -> int:
        return len(self.free_gpus)


@dataclass(frozen=True)
class ClusterPlan:
    clusters: tuple[int, ...]  # the clusters the job's servers come from
    # Indices into the candidate servers given to plan_clusters: for one
    # cluster, all of its candidates (placement still chooses among them);
    # across clusters, exactly the job's servers.
    members: tuple[int, ...]
    key: tuple[Any, ...]  # lower is better: to weigh one rail set's plan against another's


def plan_clusters(
    view: ClusterView, pods: np.ndarray, spare: np.ndarray, m: int, max_pods: int = 0
) -> ClusterPlan | None:
    """The cluster(s) for a job of `m` servers, from candidate servers given
    as their pods and the free GPUs each has before the job (`spare`); None
    if they cannot hold it (within `max_pods` pods, if set)."""
    ppc, n_clusters = view.pods_per_cluster, view.clusters
    cluster = pods // ppc
    per_pod = np.bincount(pods, minlength=n_clusters * ppc)
    by_cluster = per_pod.reshape(n_clusters, ppc)
    # Each cluster's room (within max_pods pods): across clusters an upper
    # bound, as a set's best pods are among its clusters' best.
    room = -np.sort(-by_cluster, axis=1)[:, :max_pods].sum(axis=1) if max_pods else by_cluster.sum(axis=1)
    inside = np.flatnonzero(room >= m).tolist()
    if inside:
        left = _tightest_leftover(cluster, spare, m, n_clusters)
        best = min(inside, key=lambda c: (int(left[c]), view.free_gpus[c], view.uplink_bps[c], c))
        key = (1, int(left[best]), view.free_gpus[best], view.uplink_bps[best], (best,))
        return ClusterPlan((best,), tuple(np.flatnonzero(cluster == best).tolist()), key)
    most_room = sorted(range(n_clusters), key=lambda c: (-int(room[c]), c))
    order = np.lexsort((spare, pods))  # by pod, each pod's tightest first
    runs = _PodRuns(
        per_pod.tolist(),
        np.searchsorted(pods[order], np.arange(len(per_pod))).tolist(),
        np.concatenate(([0], np.cumsum(spare[order]))).tolist(),
    )
    for n in range(2, n_clusters + 1):
        if sum(int(room[c]) for c in most_room[:n]) < m:
            continue  # no n clusters have room
        if math.comb(n_clusters, n) <= CLUSTER_SET_LIMIT:
            sets: Sequence[Sequence[int]] = list(itertools.combinations(range(n_clusters), n))
        else:
            sets = [(*most_room[: n - 1], last) for last in most_room[n - 1 :]]
        spreads = [spread for chosen in sets if (spread := _spread(view, runs, chosen, m, max_pods))]
        if spreads:
            key, takes = min(spreads)
            members = [i for p, t in takes for i in order[runs.at[p] : runs.at[p] + t].tolist()]
            return ClusterPlan(key[-1], tuple(members), key)
    return None


def _tightest_leftover(cluster: np.ndarray, spare: np.ndarray, m: int, n_clusters: int) -> np.ndarray:
    """Per cluster, the free GPUs its m tightest candidates would leave."""
    order = np.lexsort((spare, cluster))
    grouped = cluster[order]
    rank = np.arange(len(order)) - np.searchsorted(grouped, grouped)
    take = rank < m
    return np.bincount(grouped[take], weights=spare[order][take], minlength=n_clusters)


@dataclass(frozen=True)
class _PodRuns:
    """The candidates by pod, each pod's tightest first: pod p's `count[p]`
    of them start at `at[p]`; `spare_before[i]`: the free GPUs of the first i."""

    count: list[int]
    at: list[int]
    spare_before: list[int]


def _spread(
    view: ClusterView, runs: _PodRuns, chosen: Sequence[int], m: int, max_pods: int
) -> tuple[tuple[Any, ...], list[tuple[int, int]]] | None:
    """The job across `chosen` clusters as (plan key, servers taken per pod),
    or None if they cannot hold it: the cluster with the most room first,
    taken whole, then the next; each cluster's largest pods first, and each
    pod's tightest servers first."""
    ppc, count = view.pods_per_cluster, runs.count
    usable = [p for c in chosen for p in range(c * ppc, (c + 1) * ppc) if count[p]]
    if max_pods:
        usable = sorted(usable, key=lambda p: (-count[p], p))[:max_pods]
    room = dict.fromkeys(chosen, 0)
    for p in usable:
        room[p // ppc] += count[p]
    if sum(room.values()) < m:
        return None
    usable.sort(key=lambda p: (-room[p // ppc], p // ppc, -count[p], p))
    takes, left, leftover = [], m, 0
    for p in usable:
        t = min(count[p], left)
        takes.append((p, t))
        leftover += runs.spare_before[runs.at[p] + t] - runs.spare_before[runs.at[p]]
        left -= t
        if not left:
            break
    used = tuple(sorted({p // ppc for p, _ in takes}))
    free, load = sum(view.free_gpus[c] for c in used), sum(view.uplink_bps[c] for c in used)
    return (len(used), leftover, free, load, used), takes


def cross_cluster_share(spec: FabricSpec, flows: Sequence[JobFlow]) -> float:
    """The share of a job's collective demand (bps) that crosses clusters:
    what it puts on the core. 0 on a fabric of one cluster."""
    if spec.clusters <= 1:
        return 0.0
    ppc = spec.pods_per_cluster
    total = across = 0.0
    for flow in flows:
        total += flow.demand_bps
        if flow.src.pod // ppc != flow.dst.pod // ppc:
            across += flow.demand_bps
    return across / total if total else 0.0
