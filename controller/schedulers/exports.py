"""The fabric in the formats schedulers read, from the fabric model alone
(pure: a string out, nothing written). `railyard export KIND` prints them.

Each exporter follows its upstream format (cited at the function), names
nodes by the host map, and builds on `fabric_tree`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml

from controller.errors import FieldError
from controller.fabric import Fabric
from controller.schedulers.hostlist import compress
from controller.schedulers.hosts import HostMap
from controller.schedulers.topology import FabricTree, fabric_tree

HOSTNAME = "kubernetes.io/hostname"
# Railyard's own node labels, coarsest first: the domains Kueue levels name.
SPINE_BLOCK = "railyard.io/spine-block"
POD = "railyard.io/pod"  # a fat tree's pods only
CLUSTER = "railyard.io/cluster"  # a three-tier fabric's clusters only
LEAF_GROUP = "railyard.io/leaf-group"


def _dns_name(text: str) -> str:
    """A fabric name as a Kubernetes object name (lowercase RFC 1123)."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "fabric"


def _spine_block(fabric: Fabric) -> str:
    return f"{_dns_name(fabric.spec.name)}-spines"


def slurm_tree(fabric: Fabric, hosts: HostMap) -> str:
    """Slurm topology.conf for topology/tree (https://slurm.schedmd.com/topology.conf.html):
    one line per switch, `SwitchName=NAME Nodes=HOSTLIST` for leaves and
    `SwitchName=NAME Switches=HOSTLIST` above them. Three tiers: a cluster's
    spines count as one switch (`ryc<c>`) over its leaf groups, as a pod's
    rail leaves count as one leaf, and each core lists the clusters, as each
    spine of two tiers lists the leaf groups."""
    tree = fabric_tree(fabric)
    lines = [
        f"# Slurm topology/tree for fabric {fabric.spec.name} (railyard export slurm-tree).",
        "# A leaf is the set of leaf switches its servers connect to: a rail-optimized",
        "# pod's rail leaves (one per rail) count as one, as Slurm wants each node under one leaf.",
    ]
    for group in tree.groups:
        nodes = compress(hosts.node(s) for s in group.servers)
        note = f"  # rail leaves {compress(group.leaves)}" if len(group.leaves) > 1 else ""
        lines.append(f"SwitchName={group.name} Nodes={nodes}{note}")
    for cluster in tree.clusters:
        lines.append(
            f"SwitchName={cluster.name} Switches={compress(cluster.groups)}  # spines {compress(cluster.spines)}"
        )
    for switch in (*tree.aggs, *tree.top):
        if switch.children:
            lines.append(f"SwitchName={switch.name} Switches={compress(switch.children)}")
    return "\n".join(lines) + "\n"


# Which file a Slurm release reads topology/block from, and how it states the
# sizes (topology.conf(5) and topology.yaml(5) of each release, SchedMD/slurm
# tags slurm-23-11-0-1, slurm-24-05-0-1, slurm-24-11-7-1, slurm-25-05-0-1).
SLURM_BLOCK_LEVELS = (23, 11)  # topology.conf: BlockName= lines, BlockLevels= (aggregation levels)
SLURM_BLOCK_SIZES = (24, 5)  # topology.conf: BlockName= lines, BlockSizes= (node counts)
SLURM_TOPOLOGY_YAML = (25, 5)  # topology.yaml, which 25.05 reads in preference to topology.conf
SLURM_BLOCK_DEFAULT = "25.05"


class SlurmVersionError(FieldError):
    context = "export"


def slurm_release(text: str) -> tuple[int, int]:
    """A Slurm release as (year, month), 23.11 or later (topology/block's first)."""
    match = re.fullmatch(r"(\d{2})\.(\d{2})(\.\d+)?", text)
    release = (int(match.group(1)), int(match.group(2))) if match else None
    if release is None or release < SLURM_BLOCK_LEVELS:
        raise SlurmVersionError("slurm-version", f"got {text!r}", "a Slurm release of 23.11 or later, e.g. 24.11")
    return release


def slurm_block(fabric: Fabric, hosts: HostMap, slurm: str = SLURM_BLOCK_DEFAULT) -> str:
    """Slurm topology/block for the release `slurm`: 25.05 and later read
    topology.yaml (https://slurm.schedmd.com/topology.yaml.html); 23.11 to
    24.11 read `BlockName=` lines from topology.conf, with `BlockLevels=`
    (23.11) or `BlockSizes=` (24.05, 24.11).

    One block per pod (a rail-optimized pod's servers share all its rail
    leaves; a fat tree's pod its aggregation switches). Block sizes: the
    smallest pod, doubled up to the whole fabric (any set of pods is one
    spine hop apart).

    Three tiers keep a block per pod, not per cluster: Slurm builds larger
    blocks only by joining adjacent base blocks
    (https://slurm.schedmd.com/topology.html#block), so a cluster-wide base
    block would lose the pod, the closest domain. It joins aligned runs of
    2, 4, ... blocks in listed order (block 4i..4i+3 for size 4, in its
    block_record.c); pods are listed cluster by cluster, and only the sizes
    whose runs never mix part of a cluster with another are kept."""
    release = slurm_release(slurm)
    tree = fabric_tree(fabric)
    blocks = _pod_blocks(tree)
    smallest = min(len(servers) for servers in blocks.values())
    total = sum(len(servers) for servers in blocks.values())
    per_cluster = len(tree.clusters[0].groups) if tree.clusters else None  # the spec sizes every cluster alike
    sizes = _block_sizes(smallest, total, per_cluster)
    nodes = {name: compress(hosts.node(s) for s in servers) for name, servers in blocks.items()}
    file = "topology.conf" if release < SLURM_TOPOLOGY_YAML else "topology.yaml"
    header = f"# {file} for Slurm {slurm}'s topology/block, fabric {fabric.spec.name} (railyard export slurm-block)\n"
    if release < SLURM_TOPOLOGY_YAML:
        lines = [f"BlockName={name} Nodes={hostlist}" for name, hostlist in nodes.items()]
        if release < SLURM_BLOCK_SIZES:
            # 23.11 counts levels: level i joins 2^i base blocks (every block is the same size here).
            levels = [(size // smallest).bit_length() - 1 for size in sizes]
            lines.append("BlockLevels=" + ",".join(map(str, levels)))
        else:
            lines.append("BlockSizes=" + ",".join(map(str, sizes)))
        return header + "\n".join(lines) + "\n"
    doc = [
        {
            "topology": _dns_name(fabric.spec.name),
            "cluster_default": True,
            "block": {
                "block_sizes": sizes,
                "blocks": [{"block": name, "nodes": hostlist} for name, hostlist in nodes.items()],
            },
        }
    ]
    return header + yaml.safe_dump(doc, sort_keys=False)


def _pod_blocks(tree: FabricTree) -> dict[str, tuple[str, ...]]:
    """Pod -> its servers: a fat tree's pods, or else the leaf groups
    (three tiers: cluster by cluster, so a cluster's blocks are contiguous)."""
    servers_of = {g.name: g.servers for g in tree.groups}
    if tree.pods:
        return {pod: tuple(s for g in groups for s in servers_of[g]) for pod, groups in tree.pods.items()}
    if tree.clusters:
        return {g: servers_of[g] for cluster in tree.clusters for g in cluster.groups}
    return dict(servers_of)


def _block_sizes(smallest: int, total: int, pods_per_cluster: int | None) -> list[int]:
    """`smallest` times runs of 1, 2, 4, ... base blocks, up to `total` nodes.
    With clusters, only runs that stay in one cluster (the run divides a
    cluster's pods) or take whole clusters (a cluster's pods divide the run):
    a run across a cluster's edge is a core hop wide, not a block. Dropping
    the others loses nothing above them: Slurm places a job larger than the
    largest size across the whole fabric, as the top size would."""
    sizes, run = [], 1
    while smallest * run <= total:
        if pods_per_cluster is None or pods_per_cluster % run == 0 or run % pods_per_cluster == 0:
            sizes.append(smallest * run)
        run *= 2
    return sizes


def _labels(fabric: Fabric, tree: FabricTree) -> dict[str, dict[str, str]]:
    """Railyard server -> its domain labels, coarsest first."""
    pod_of = {g: pod for pod, groups in tree.pods.items() for g in groups}
    cluster_of = {g: cluster.name for cluster in tree.clusters for g in cluster.groups}
    out = {}
    for group in tree.groups:
        for server in group.servers:
            labels = {SPINE_BLOCK: _spine_block(fabric)}
            if group.name in pod_of:
                labels[POD] = pod_of[group.name]
            if group.name in cluster_of:
                labels[CLUSTER] = cluster_of[group.name]
            labels[LEAF_GROUP] = group.name
            out[server] = labels
    return out


def _nodes(hosts: HostMap, labels_of: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Node objects carrying only labels, for `kubectl apply --server-side`."""
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": hosts.node(server), "labels": labels}}
        for server, labels in labels_of.items()
    ]


def kueue(fabric: Fabric, hosts: HostMap) -> str:
    """Kueue Topology Aware Scheduling (kueue.x-k8s.io/v1beta2, served from
    Kueue 0.15, https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/):
    a `Topology` whose levels, coarsest first, are node labels; the
    `ResourceFlavor` that names it and selects the fabric's nodes (a
    ClusterQueue's resource group names the flavor); and the nodes labelled.
    Three tiers add a cluster level between the whole fabric and the leaf
    groups."""
    tree = fabric_tree(fabric)
    levels = [SPINE_BLOCK, *([POD] if tree.pods else []), *([CLUSTER] if tree.clusters else []), LEAF_GROUP, HOSTNAME]
    name = f"railyard-{_dns_name(fabric.spec.name)}"
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        # Every node of the fabric carries its spine block: the flavor's nodes are the fabric's.
        "spec": {"nodeLabels": {SPINE_BLOCK: _spine_block(fabric)}, "topologyName": name},
    }
    return _stream([topology, flavor, *_nodes(hosts, _labels(fabric, tree))])


def volcano(fabric: Fabric, hosts: HostMap) -> str:
    """Volcano HyperNodes (topology.volcano.sh/v1alpha1,
    https://volcano.sh/en/docs/network_topology_aware_scheduling/): tier 1 a
    leaf group's nodes, then a fat tree's pod or a three-tier fabric's
    cluster (its leaf groups), then every domain under the top switches."""
    tree = fabric_tree(fabric)

    def hypernode(name: str, tier: int, kind: str, members: list[str]) -> dict[str, Any]:
        return {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": name},
            "spec": {
                "tier": tier,
                "members": [{"type": kind, "selector": {"exactMatch": {"name": m}}} for m in members],
            },
        }

    docs = [hypernode(g.name, 1, "Node", [hosts.node(s) for s in g.servers]) for g in tree.groups]
    below = [g.name for g in tree.groups]
    middle = dict(tree.pods) or {cluster.name: cluster.groups for cluster in tree.clusters}
    if middle:
        docs += [hypernode(name, 2, "HyperNode", list(groups)) for name, groups in middle.items()]
        below = list(middle)
    if tree.top:
        docs.append(hypernode(_spine_block(fabric), 3 if middle else 2, "HyperNode", below))
    return _stream(docs)


# Topograph 1.0's node labels (NVIDIA/topograph v1.0.0, docs/engines/k8s.md):
# `fabric.topograph.run/tier-N`, tier 0 the switch closest to the node. So
# tier 0 is a node's leaf group; tier 1 the spines (two tiers), or a fat
# tree's pod or a three-tier fabric's cluster; tier 2 the cores over those.
# Topograph's accelerator domain (`accelerator.topograph.run/domain`, an
# NVLink domain) is not the network's: Railyard leaves it to Topograph.
TOPOGRAPH_TIER = "fabric.topograph.run/tier-{}"


def topograph_labels(fabric: Fabric, hosts: HostMap) -> str:
    """The node labels NVIDIA Topograph (1.0 or later) writes, so schedulers
    that read them (KAI, Kueue) see the same fabric Railyard steers."""
    tree = fabric_tree(fabric)
    out = {}
    for server, labels in _labels(fabric, tree).items():
        middle = labels.get(POD) or labels.get(CLUSTER)
        tiers = [labels[LEAF_GROUP], *([middle] if middle else []), labels[SPINE_BLOCK]]
        out[server] = {TOPOGRAPH_TIER.format(i): name for i, name in enumerate(tiers)}
    return _stream(_nodes(hosts, out))


def _stream(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


EXPORTERS: dict[str, Callable[[Fabric, HostMap], str]] = {
    "slurm-tree": slurm_tree,
    "slurm-block": slurm_block,
    "kueue": kueue,
    "volcano": volcano,
    "topograph-labels": topograph_labels,
}
