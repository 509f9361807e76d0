"""Builders: FabricSpec -> Fabric, one per fabric kind.

Port numbering (derived, never stored):
- rail leaf: ports 1..S face servers (server s on port s+1), then uplinks,
  spine j on port S+1+j;
- shared spine: leaf (pod p, rail r) on port 1 + p*R + r;
- per-rail spine: leaf (pod p, its rail) on port 1 + p;
- fat tree: edge ports 1..k/2 face hosts, k/2+1..k face aggs; agg ports
  1..k/2 face edges, k/2+1..k face cores; core port p+1 faces pod p.
"""

from __future__ import annotations

from controller.fabric import addressing as ad
from controller.fabric.addressing import NicId
from controller.fabric.model import Endpoint, Fabric, Link, Server, Switch, Tier
from controller.fabric.spec import FabricSpec, Kind, PlaneMode

GBPS = 1e9
MBPS = 1e6


def build_fabric(spec: FabricSpec) -> Fabric:
    if spec.kind is Kind.FAT_TREE:
        return _fat_tree(spec)
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


def _rail_fabric(spec: FabricSpec) -> Fabric:
    """Rail-optimized (shared or per-rail spines) and rail-only (no spines)."""
    rates = _Rates(spec)
    servers = _servers(spec)
    n_down = spec.servers_per_pod
    switches: list[Switch] = []
    links: list[Link] = []

    for pod in range(spec.pods):
        for rail in range(spec.rails):
            leaf = ad.leaf_name(pod, rail)
            switches.append(Switch(leaf, Tier.LEAF, ad.dpid("leaf", pod, rail, 0), index=0, pod=pod, rail=rail))
            for s in range(n_down):
                nic = NicId(rail, pod, s)
                links.append(rates.link(Endpoint(ad.nic_name(nic), 0), Endpoint(leaf, s + 1)))

    if spec.kind is Kind.RAIL_OPTIMIZED:
        uplink_scale = n_down / (spec.spines * spec.oversubscription)
        if spec.plane_mode is PlaneMode.SHARED:
            for j in range(spec.spines):
                spine = ad.spine_name(j)
                switches.append(Switch(spine, Tier.SPINE, ad.dpid("spine", 0, 0, j), index=j))
                for pod in range(spec.pods):
                    for rail in range(spec.rails):
                        links.append(
                            rates.link(
                                Endpoint(ad.leaf_name(pod, rail), n_down + 1 + j),
                                Endpoint(spine, 1 + pod * spec.rails + rail),
                                uplink_scale,
                            )
                        )
        else:
            for rail in range(spec.rails):
                for j in range(spec.spines):
                    spine = ad.spine_name(j, plane=rail)
                    switches.append(
                        Switch(spine, Tier.SPINE, ad.dpid("spine", 0, rail, j), index=j, rail=rail, plane=rail)
                    )
                    for pod in range(spec.pods):
                        links.append(
                            rates.link(
                                Endpoint(ad.leaf_name(pod, rail), n_down + 1 + j),
                                Endpoint(spine, 1 + pod),
                                uplink_scale,
                            )
                        )
    return Fabric(spec, tuple(switches), servers, tuple(links))


def _fat_tree(spec: FabricSpec) -> Fabric:
    rates = _Rates(spec)
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
                links.append(rates.link(Endpoint(ad.nic_name(nic), 0), Endpoint(edge, h + 1)))
        for a in range(half):
            agg = ad.agg_name(pod, a)
            switches.append(Switch(agg, Tier.AGG, ad.dpid("agg", pod, 0, a), index=a, pod=pod, rail=0))
            for e in range(half):
                links.append(rates.link(Endpoint(ad.edge_name(pod, e), half + 1 + a), Endpoint(agg, e + 1)))
            for i in range(half):
                links.append(rates.link(Endpoint(agg, half + 1 + i), Endpoint(ad.spine_name(a * half + i), pod + 1)))
    return Fabric(spec, tuple(switches), servers, tuple(links))
