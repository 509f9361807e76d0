"""The fabric as a tree of locality domains, the shape every scheduler's
topology format takes:

- a *leaf group* is the set of leaf switches a server connects to. In a
  rail-optimized pod every server connects to the same R rail leaves (one
  per rail), so the pod's rail leaves form one group, named after the pod
  (`ryl<pod>`). A fat tree's edge switch is a group of its own.
- above it, each switch of the next tier lists the groups (or, in a fat
  tree, the aggregation switches) it connects.
- a three-tier rail fabric adds a *cluster* between them: every spine of a
  cluster reaches every leaf group of it, so the spines are one domain
  (`ryc<c>`), as a pod's rail leaves are; each core takes one uplink from
  every cluster (from the spine of its plane), so it joins the clusters.

Schedulers only need "which nodes are close". Rail leaves are listed for
people (comments), not as separate Slurm leaves: Slurm warns when one node
sits under several leaf switches.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.fabric import Fabric, Tier
from controller.fabric import addressing as ad


@dataclass(frozen=True)
class LeafGroup:
    name: str
    leaves: tuple[str, ...]  # the switches, by name
    servers: tuple[str, ...]  # Railyard server names


@dataclass(frozen=True)
class UpperSwitch:
    name: str
    tier: Tier
    children: tuple[str, ...]  # leaf groups; a fat tree's cores: aggregation switches; three tiers' cores: clusters
    pod: int | None = None  # a fat tree's aggregation switch: its pod
    cluster: int | None = None  # a three-tier fabric's spine: its cluster


@dataclass(frozen=True)
class Cluster:
    name: str
    spines: tuple[str, ...]  # the switches, by name
    groups: tuple[str, ...]  # its leaf groups, in pod order


@dataclass(frozen=True)
class FabricTree:
    groups: tuple[LeafGroup, ...]
    aggs: tuple[UpperSwitch, ...]  # a fat tree's aggregation switches; empty otherwise
    spines: tuple[UpperSwitch, ...]
    clusters: tuple[Cluster, ...] = ()  # a three-tier fabric's clusters; empty otherwise
    cores: tuple[UpperSwitch, ...] = ()  # a three-tier fabric's cores, over clusters; empty otherwise

    @property
    def top(self) -> tuple[UpperSwitch, ...]:
        """The switches that join every domain below them: the cores in three tiers, else the spines."""
        return self.cores or self.spines

    @property
    def pods(self) -> dict[str, tuple[str, ...]]:
        """A fat tree's pods (aggregation blocks) -> their leaf groups; empty otherwise."""
        blocks: dict[str, set[str]] = {}
        for agg in self.aggs:
            assert agg.pod is not None
            blocks.setdefault(ad.pod_block_name(agg.pod), set()).update(agg.children)
        return {name: tuple(sorted(children)) for name, children in sorted(blocks.items())}


def fabric_tree(fabric: Fabric) -> FabricTree:
    leaves_of: dict[str, set[str]] = {}
    for server in fabric.servers:
        leaves_of[server.name] = {fabric.attachment(nic).node for nic in server.nics}
    by_leaves: dict[frozenset[str], list[str]] = {}
    for server in fabric.servers:
        by_leaves.setdefault(frozenset(leaves_of[server.name]), []).append(server.name)
    group_of: dict[str, str] = {}
    groups = []
    for leaves, servers in by_leaves.items():
        name = _group_name(fabric, leaves)
        groups.append(LeafGroup(name, tuple(sorted(leaves)), tuple(servers)))
        group_of.update((leaf, name) for leaf in leaves)
    aggs = tuple(_upper(fabric, Tier.AGG, group_of))
    below_spines = {a.name: a.name for a in aggs} if aggs else group_of
    spines = tuple(_upper(fabric, Tier.SPINE, below_spines))
    clusters = _clusters(spines, [g.name for g in groups])
    # A core reaches one spine of each cluster, but which one says nothing of
    # locality: any spine of a cluster reaches all of it. So its children are clusters.
    cluster_of = {spine: cluster.name for cluster in clusters for spine in cluster.spines}
    cores = tuple(_upper(fabric, Tier.CORE, cluster_of))
    return FabricTree(tuple(groups), aggs, spines, clusters, cores)


def _group_name(fabric: Fabric, leaves: frozenset[str]) -> str:
    if len(leaves) == 1:
        return next(iter(leaves))
    pods = {fabric.switch(leaf).pod for leaf in leaves}
    (pod,) = pods  # a server's rail leaves are its pod's
    assert pod is not None
    return ad.leaf_group_name(pod)


def _upper(fabric: Fabric, tier: Tier, below: dict[str, str]) -> list[UpperSwitch]:
    out = []
    for switch in fabric.switches_in(tier):
        peers = {link.peer(switch.name).node for link in fabric.ports(switch.name).values()}
        children = sorted({below[peer] for peer in peers if peer in below})
        pod = switch.pod if tier is Tier.AGG else None
        cluster = switch.cluster if tier is Tier.SPINE else None
        out.append(UpperSwitch(switch.name, tier, tuple(children), pod, cluster))
    return out


def _clusters(spines: tuple[UpperSwitch, ...], group_order: list[str]) -> tuple[Cluster, ...]:
    """A three-tier fabric's clusters, in cluster order; none without cluster spines.
    Leaf groups keep pod order, the order Slurm's blocks aggregate in."""
    spines_of: dict[int, list[UpperSwitch]] = {}
    for spine in spines:
        if spine.cluster is not None:
            spines_of.setdefault(spine.cluster, []).append(spine)
    out = []
    for cluster, members in sorted(spines_of.items()):
        below = {child for spine in members for child in spine.children}
        groups = tuple(g for g in group_order if g in below)
        out.append(Cluster(ad.cluster_group_name(cluster), tuple(s.name for s in members), groups))
    return tuple(out)
