"""The fabric as data: switches, servers, NICs and links, plus a networkx graph.

Built only by builders.py from a FabricSpec; immutable afterwards. Link
capacities are kept twice, for the real fabric and for the emulation, so the
same model serves a 16k-GPU placement benchmark and a 2-pod Mininet run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from controller.fabric import addressing
from controller.fabric.addressing import NicId
from controller.fabric.spec import FabricSpec


class Tier(str, enum.Enum):
    LEAF = "leaf"  # rail leaf (pod, rail); a fat tree's edge switch
    AGG = "agg"  # fat-tree aggregation only
    SPINE = "spine"  # spine; a fat tree's core switch


@dataclass(frozen=True)
class Switch:
    name: str
    tier: Tier
    dpid: int
    index: int
    pod: int | None = None  # None for spines
    rail: int | None = None  # the rail a leaf serves; None for shared spines
    plane: int | None = None  # per-rail spines: the plane (= rail) they belong to


@dataclass(frozen=True)
class Server:
    name: str
    pod: int
    index: int
    nics: tuple[NicId, ...]


@dataclass(frozen=True)
class Endpoint:
    node: str  # switch name, or NIC name for the server side of an access link
    port: int  # OpenFlow port number on a switch; 0 on a NIC


@dataclass(frozen=True)
class Link:
    a: Endpoint
    b: Endpoint
    capacity_bps: float
    emulated_bps: float

    @property
    def is_access(self) -> bool:
        return self.a.port == 0 or self.b.port == 0

    def end(self, node: str) -> Endpoint:
        if node == self.a.node:
            return self.a
        if node == self.b.node:
            return self.b
        raise KeyError(f"{node} is not on link {self.a.node}-{self.b.node}")

    def peer(self, node: str) -> Endpoint:
        return self.b if self.end(node) is self.a else self.a


class FabricError(KeyError):
    pass


class Fabric:
    def __init__(
        self,
        spec: FabricSpec,
        switches: tuple[Switch, ...],
        servers: tuple[Server, ...],
        links: tuple[Link, ...],
    ) -> None:
        self.spec = spec
        self.switches = {s.name: s for s in switches}
        self.servers = servers
        self.links = links
        self._ports: dict[str, dict[int, Link]] = {name: {} for name in self.switches}
        self._nic_links: dict[str, Link] = {}
        for link in links:
            for end in (link.a, link.b):
                if end.port:
                    if end.port in self._ports[end.node]:
                        raise FabricError(f"port {end.port} of {end.node} used twice")
                    self._ports[end.node][end.port] = link
                else:
                    self._nic_links[end.node] = link

    # --- lookups -----------------------------------------------------------
    @cached_property
    def nics(self) -> tuple[NicId, ...]:
        return tuple(nic for server in self.servers for nic in server.nics)

    def switch(self, name: str) -> Switch:
        try:
            return self.switches[name]
        except KeyError:
            raise FabricError(f"no switch named {name!r}") from None

    def switches_in(self, tier: Tier) -> tuple[Switch, ...]:
        return tuple(s for s in self.switches.values() if s.tier is tier)

    def ports(self, switch: str) -> dict[int, Link]:
        return self._ports[self.switch(switch).name]

    def access_link(self, nic: NicId) -> Link:
        """The link between a NIC and its leaf."""
        try:
            return self._nic_links[addressing.nic_name(nic)]
        except KeyError:
            raise FabricError(f"no NIC {nic} in fabric {self.spec.name}") from None

    def attachment(self, nic: NicId) -> Endpoint:
        """The leaf port a NIC is cabled to."""
        return self.access_link(nic).peer(addressing.nic_name(nic))

    def uplinks(self, leaf: str) -> tuple[Endpoint, ...]:
        """The leaf's own ports that face a higher tier, in port order."""
        return tuple(
            Endpoint(leaf, port)
            for port, link in sorted(self.ports(leaf).items())
            if not link.is_access
        )

    def peer(self, switch: str, port: int) -> Endpoint:
        try:
            return self.ports(switch)[port].peer(switch)
        except KeyError:
            raise FabricError(f"{switch} has no port {port}") from None

    def local_nics(self, switch: str) -> dict[int, NicId]:
        """NICs directly attached to a switch, by port."""
        by_name = {addressing.nic_name(n): n for n in self.nics}
        return {
            port: by_name[link.peer(switch).node]
            for port, link in self.ports(switch).items()
            if link.is_access
        }

    # --- graph -------------------------------------------------------------
    @cached_property
    def graph(self) -> nx.Graph:
        """Undirected graph over switch names and NIC names; edges carry `link`."""
        graph = nx.Graph()
        for switch in self.switches.values():
            graph.add_node(switch.name, kind="switch", tier=switch.tier.value)
        for nic in self.nics:
            graph.add_node(addressing.nic_name(nic), kind="nic", rail=nic.rail, pod=nic.pod, server=nic.server)
        for link in self.links:
            graph.add_edge(link.a.node, link.b.node, link=link, capacity_bps=link.capacity_bps)
        return graph

    def next_hops(self, switch: str, dst: NicId) -> tuple[int, ...]:
        """Ports of `switch` on every shortest path to `dst` (the ECMP set)."""
        dist = self._distances_to(self.attachment(dst).node)
        here = dist.get(switch)
        if here is None:
            return ()
        if here == 0:
            return (self.attachment(dst).port,)
        return tuple(
            port
            for port, link in sorted(self.ports(switch).items())
            if dist.get(link.peer(switch).node, -1) == here - 1
        )

    def _distances_to(self, leaf: str) -> dict[str, int]:
        cache = self.__dict__.setdefault("_dist_cache", {})
        if leaf not in cache:
            switches_only = self.graph.subgraph(self.switches)
            cache[leaf] = nx.single_source_shortest_path_length(switches_only, leaf)
        return cache[leaf]

    def equal_cost_paths(self, src: NicId, dst: NicId) -> list[tuple[str, ...]]:
        """Every shortest switch path from src's leaf to dst's leaf."""
        a, b = self.attachment(src).node, self.attachment(dst).node
        switches_only = self.graph.subgraph(self.switches)
        try:
            return [tuple(p) for p in nx.all_shortest_paths(switches_only, a, b)]
        except nx.NetworkXNoPath:
            return []

    def _switch_hops(self, src: NicId, dst: NicId, via: str | None) -> tuple[Endpoint, ...]:
        """Egress ports from src's leaf up to (not including) dst's leaf, on the
        first (sorted) equal-cost path that crosses `via`. Depends only on the
        two leaves, so it is computed once per (leaf pair, via)."""
        a, b = self.attachment(src).node, self.attachment(dst).node
        cache = self.__dict__.setdefault("_hop_cache", {})
        key = (a, b, via)
        if key not in cache:
            paths = sorted(p for p in self.equal_cost_paths(src, dst) if via is None or via in p)
            if not paths:
                raise FabricError(f"no equal-cost path from {a} to {b}" + (f" via {via}" if via else ""))
            if via is None and len(paths) > 1:
                raise FabricError(f"{a} to {b} has {len(paths)} equal-cost paths: name the one to use")
            path = paths[0]
            cache[key] = tuple(
                Endpoint(here, next(p for p, link in sorted(self.ports(here).items()) if link.peer(here).node == there))
                for here, there in zip(path, path[1:])
            )
        return cache[key]

    def egress_path(self, src: NicId, dst: NicId, via: str | None = None) -> tuple[Endpoint, ...]:
        """Every egress a src->dst packet leaves through: the source NIC (port 0),
        each switch on the way, and the last leaf's port to dst. `via` (a
        spine, or a fat tree's core) picks among equal-cost paths."""
        nic = Endpoint(addressing.nic_name(src), 0)
        return (nic, *self._switch_hops(src, dst, via), self.attachment(dst))

    def steering_hops(self, src: NicId, dst: NicId, via: str) -> tuple[Endpoint, ...]:
        """The hops of egress_path where the underlay's ECMP has a choice: where
        an overlay entry is needed to send the traffic across `via`."""
        try:
            hops = self._switch_hops(src, dst, via)
        except FabricError:
            return ()
        return tuple(hop for hop in hops if len(self.next_hops(hop.node, dst)) > 1)

    def link_at(self, egress: Endpoint) -> Link:
        """The link an egress port (or a NIC, port 0) transmits on."""
        if egress.port:
            return self.ports(egress.node)[egress.port]
        return self._nic_links[egress.node]

    @property
    def gpu_count(self) -> int:
        return len(self.nics)
