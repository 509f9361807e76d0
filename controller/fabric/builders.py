"""Builders: FabricSpec -> Fabric, one per fabric kind.

Each builder cables its switches with the port numbering of its topology
(topology.py, and cluster_topology.py for three tiers, where the numbering
is written down) and hands the Fabric that topology, which routes by the
same formulas.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.fabric import addressing as ad
from controller.fabric.addressing import NicId
from controller.fabric.cluster_topology import ClusterTopology
from controller.fabric.model import Endpoint, Fabric, Link, Server, Switch, Tier
from controller.fabric.spec import FabricSpec, Kind, PlaneMode
from controller.fabric.topology import FatTreeTopology, RailTopology

GBPS = 1e9
MBPS = 1e6


def build_fabric(spec: FabricSpec) -> Fabric:
    if spec.kind is Kind.FAT_TREE:
        return _fat_tree(spec)
    if spec.core is not None:
        return _clustered_rail_fabric(spec)
    return _rail_fabric(spec)


class _Rates:
    """Capacity of a link that carries `scale` NICs' worth of traffic."""

    def __init__(self, spec: FabricSpec) -> None:
        self.nic = spec.rates.nic_gbps * GBPS
        self.emulated_nic = spec.rates.emulated_nic_mbps * MBPS

    def link(self, a: Endpoint, b: Endpoint, scale: float = 1.0) -> Link:
        return Link(a, b, capacity_bps=self.nic * scale, emulated_bps=self.emulated_nic * scale)


def _servers(spec: FabricSpec) -> tuple[Server, ...]:
    return tuple(
        Server(
            name=ad.server_name(pod, s),
            pod=pod,
            index=s,
            nics=tuple(NicId(rail, pod, s) for rail in range(spec.rails)),
        )
        for pod in range(spec.pods)
        for s in range(spec.servers_per_pod)
    )


def _leaves(
    spec: FabricSpec,
    rates: _Rates,
    access_port: Callable[[int], int],
    cluster_of: Callable[[int], int] | None = None,
) -> tuple[list[Switch], list[Link]]:
    """Every rail leaf, cabled to its NICs."""
    switches: list[Switch] = []
    links: list[Link] = []
    for pod in range(spec.pods):
        cluster = None if cluster_of is None else cluster_of(pod)
        for rail in range(spec.rails):
            leaf = ad.leaf_name(pod, rail)
            dpid = ad.dpid("leaf", pod, rail, 0)
            switches.append(Switch(leaf, Tier.LEAF, dpid, index=0, pod=pod, rail=rail, cluster=cluster))
            for s in range(spec.servers_per_pod):
                nic = NicId(rail, pod, s)
                links.append(rates.link(Endpoint(ad.nic_name(nic), 0), Endpoint(leaf, access_port(s))))
    return switches, links


def _rail_fabric(spec: FabricSpec) -> Fabric:
    """Rail-optimized (shared or per-rail spines) and rail-only (no spines)."""
    rates = _Rates(spec)
    topo = RailTopology(spec)
    servers = _servers(spec)
    switches, links = _leaves(spec, rates, topo.access_port)

    if spec.kind is Kind.RAIL_OPTIMIZED:
        uplink_scale = spec.servers_per_pod / (spec.spines * spec.oversubscription)
        per_rail = spec.plane_mode is PlaneMode.PER_RAIL
        for plane, names in enumerate(topo.spine_names):
            for j, spine in enumerate(names):
                if per_rail:
                    switches.append(
                        Switch(spine, Tier.SPINE, ad.dpid("spine", 0, plane, j), index=j, rail=plane, plane=plane)
                    )
                else:
                    switches.append(Switch(spine, Tier.SPINE, ad.dpid("spine", 0, 0, j), index=j))
                for pod in range(spec.pods):
                    for rail in [plane] if per_rail else range(spec.rails):
                        links.append(
                            rates.link(
                                Endpoint(ad.leaf_name(pod, rail), topo.leaf_uplink_port(j)),
                                Endpoint(spine, topo.spine_port(pod, rail)),
                                uplink_scale,
                            )
                        )
    return Fabric(spec, tuple(switches), servers, tuple(links), topo)


def _clustered_rail_fabric(spec: FabricSpec) -> Fabric:
    """Three tiers: rail-optimized clusters whose spine planes a core joins
    (cluster_topology.py has the wiring and the port numbering)."""
    assert spec.core is not None
    rates = _Rates(spec)
    topo = ClusterTopology(spec)
    switches, links = _leaves(spec, rates, topo.access_port, topo.cluster_of)
    # A leaf's NICs over its uplinks; a spine's downlinks over its core links.
    leaf_uplink = spec.servers_per_pod / (spec.spines * spec.oversubscription)
    spine_downlinks = spec.pods_per_cluster * spec.rails * leaf_uplink
    core_link = spine_downlinks / spec.core.oversubscription / topo.cores_per_plane
    for c, names in enumerate(topo.spine_names):
        for j, spine in enumerate(names):
            switches.append(Switch(spine, Tier.SPINE, ad.dpid("spine", c, 0, j), index=j, cluster=c))
            for pod in range(c * spec.pods_per_cluster, (c + 1) * spec.pods_per_cluster):
                for rail in range(spec.rails):
                    links.append(
                        rates.link(
                            Endpoint(ad.leaf_name(pod, rail), topo.leaf_uplink_port(j)),
                            Endpoint(spine, topo.spine_port(pod, rail)),
                            leaf_uplink,
                        )
                    )
            for i, k in enumerate(topo.plane_cores(j)):
                core = topo.core_names[k]
                links.append(
                    rates.link(Endpoint(spine, topo.spine_core_port(i)), Endpoint(core, topo.core_port(c)), core_link)
                )
    for k, core in enumerate(topo.core_names):
        switches.append(Switch(core, Tier.CORE, ad.dpid("core", 0, 0, k), index=k))
    return Fabric(spec, tuple(switches), _servers(spec), tuple(links), topo)


def _fat_tree(spec: FabricSpec) -> Fabric:
    rates = _Rates(spec)
    topo = FatTreeTopology(spec)
    half = spec.k // 2
    servers = _servers(spec)
    switches: list[Switch] = []
    links: list[Link] = []
    for c in range(half * half):
        switches.append(Switch(ad.spine_name(c), Tier.SPINE, ad.dpid("spine", 0, 0, c), index=c))
    for pod in range(spec.k):
        for e in range(half):
            edge = ad.edge_name(pod, e)
            switches.append(Switch(edge, Tier.LEAF, ad.dpid("leaf", pod, 0, e), index=e, pod=pod, rail=0))
            for h in range(half):
                nic = NicId(0, pod, e * half + h)
                links.append(rates.link(Endpoint(ad.nic_name(nic), 0), Endpoint(edge, topo.down_port(h))))
        for a in range(half):
            agg = ad.agg_name(pod, a)
            switches.append(Switch(agg, Tier.AGG, ad.dpid("agg", pod, 0, a), index=a, pod=pod, rail=0))
            for e in range(half):
                links.append(
                    rates.link(Endpoint(ad.edge_name(pod, e), topo.up_port(a)), Endpoint(agg, topo.down_port(e)))
                )
            for i in range(half):
                core = ad.spine_name(topo.core_of(a, i))
                links.append(rates.link(Endpoint(agg, topo.up_port(i)), Endpoint(core, topo.down_port(pod))))
    return Fabric(spec, tuple(switches), servers, tuple(links), topo)
