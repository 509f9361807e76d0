"""The fabric as data: switches, servers, NICs and links, and its routing.

Built only by builders.py from a FabricSpec; immutable afterwards. Link
capacities are kept twice, for the real fabric and for the emulation, so the
same model serves a 16k-GPU placement benchmark and a 2-pod Mininet run.
Routing (equal-cost paths, vias, hops, ECMP sets) is answered by the
builder's Topology from coordinates (topology.py), not by searching a graph:
nothing grows with leaf pairs, and a 16k-GPU fabric builds in a fraction of
a second.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from controller.errors import RailyardError
from controller.fabric import addressing
from controller.fabric.addressing import NicId
from controller.fabric.spec import FabricSpec

if TYPE_CHECKING:
    import networkx as nx

    from controller.fabric.topology import Topology


class Tier(str, enum.Enum):
    LEAF = "leaf"  # rail leaf (pod, rail); a fat tree's edge switch
    AGG = "agg"  # fat-tree aggregation only
    SPINE = "spine"  # spine (of a cluster, in three tiers); a fat tree's core switch
    CORE = "core"  # a three-tier rail fabric's core: it joins the clusters' spines

    @property
    def level(self) -> int:
        """Height in the fabric: leaves 0, and each tier above one more."""
        return _LEVELS[self]


_LEVELS = {Tier.LEAF: 0, Tier.AGG: 1, Tier.SPINE: 2, Tier.CORE: 3}


@dataclass(frozen=True)
class Switch:
    name: str
    tier: Tier
    dpid: int
    index: int
    pod: int | None = None  # None for spines
    rail: int | None = None  # the rail a leaf serves; None for shared spines
    plane: int | None = None  # per-rail spines: the plane (= rail) they belong to
    cluster: int | None = None  # three tiers: the cluster of a leaf or spine; None for cores


@dataclass(frozen=True)
class Server:
    name: str
    pod: int
    index: int
    nics: tuple[NicId, ...]


class Endpoint(NamedTuple):
    """One end of a link; as a dict key, the egress port it names. A NamedTuple
    rather than a dataclass: it keys every load map, and tuple hashing is C."""

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


class FabricError(RailyardError):
    """The fabric has no such thing (a switch, port, NIC or path). The API
    checks names before it asks, so one reaching a caller is a bug (INTERNAL)."""


class Fabric:
    def __init__(
        self,
        spec: FabricSpec,
        switches: tuple[Switch, ...],
        servers: tuple[Server, ...],
        links: tuple[Link, ...],
        topology: Topology,
    ) -> None:
        self.spec = spec
        self._topology = topology
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

    @cached_property
    def _nic_ends(self) -> dict[NicId, tuple[Link, Endpoint, Endpoint]]:
        """NIC -> (access link, the NIC's own transmit end, the leaf port it is cabled to).
        Looked up on every path computation, so built once."""
        ends = {}
        for nic in self.nics:
            name = addressing.nic_name(nic)
            link = self._nic_links[name]
            ends[nic] = (link, Endpoint(name, 0), link.peer(name))
        return ends

    def has_nic(self, nic: NicId) -> bool:
        return nic in self._nic_ends

    def _nic_end(self, nic: NicId) -> tuple[Link, Endpoint, Endpoint]:
        try:
            return self._nic_ends[nic]
        except KeyError:
            raise FabricError(f"no NIC {nic} in fabric {self.spec.name}") from None

    def _known(self, src: NicId, dst: NicId) -> None:
        """Raises FabricError unless both NICs are in the fabric (src checked first)."""
        self._nic_end(src)
        self._nic_end(dst)

    @cached_property
    def _nic_names(self) -> dict[str, NicId]:
        return {addressing.nic_name(n): n for n in self.nics}

    def nic_egress(self, nic: NicId) -> Endpoint:
        """The NIC's own transmit side (port 0), where its traffic enters the fabric."""
        return self._nic_end(nic)[1]

    @cached_property
    def pod_uplinks(self) -> dict[int, tuple[Endpoint, ...]]:
        """Per pod, the egress ports of its switches that face a higher tier."""
        out: dict[int, list[Endpoint]] = {}
        for sw in self.switches.values():
            if sw.pod is None:
                continue
            ups = [
                Endpoint(sw.name, p)
                for p, link in sorted(self._ports[sw.name].items())
                if not link.is_access and self.switches[link.peer(sw.name).node].pod != sw.pod
            ]
            out.setdefault(sw.pod, []).extend(ups)
        return {pod: tuple(ups) for pod, ups in out.items()}

    @cached_property
    def spine_tier(self) -> tuple[Endpoint, ...]:
        """Egresses above the pods, both directions: every pod uplink and, in
        three tiers, every cluster spine's core uplink, then the port that
        faces each back. Where path choices show."""
        ups = [e for egresses in self.pod_uplinks.values() for e in egresses]
        ups += [
            Endpoint(sw.name, port)
            for sw in self.switches.values()
            if sw.tier is Tier.SPINE and sw.cluster is not None
            for port, link in sorted(self._ports[sw.name].items())
            if self.switches[link.peer(sw.name).node].tier is Tier.CORE
        ]
        return (*ups, *(self.link_at(e).peer(e.node) for e in ups))

    @cached_property
    def capacity_bps(self) -> dict[Endpoint, float]:
        """Capacity of every egress: each switch port, and each NIC's transmit side."""
        caps = {Endpoint(sw, p): link.capacity_bps for sw, ports in self._ports.items() for p, link in ports.items()}
        caps.update({ends[1]: ends[0].capacity_bps for ends in self._nic_ends.values()})
        return caps

    def access_link(self, nic: NicId) -> Link:
        """The link between a NIC and its leaf."""
        return self._nic_end(nic)[0]

    def attachment(self, nic: NicId) -> Endpoint:
        """The leaf port a NIC is cabled to."""
        return self._nic_end(nic)[2]

    def uplinks(self, leaf: str) -> tuple[Endpoint, ...]:
        """The leaf's own ports that face a higher tier, in port order."""
        return tuple(Endpoint(leaf, port) for port, link in sorted(self.ports(leaf).items()) if not link.is_access)

    def peer(self, switch: str, port: int) -> Endpoint:
        try:
            return self.ports(switch)[port].peer(switch)
        except KeyError:
            raise FabricError(f"{switch} has no port {port}") from None

    def local_nics(self, switch: str) -> dict[int, NicId]:
        """NICs directly attached to a switch, by port."""
        by_name = self._nic_names
        return {port: by_name[link.peer(switch).node] for port, link in self.ports(switch).items() if link.is_access}

    # --- routing (by the builder's formulas, see topology.py) ----------------
    def next_hops(self, switch: str, dst: NicId) -> tuple[int, ...]:
        """Ports of `switch` on every shortest path to `dst` (the ECMP set)."""
        attachment = self.attachment(dst)
        if switch == attachment.node:
            return (attachment.port,)
        sw = self.switches.get(switch)
        return () if sw is None else self._topology.next_hops(sw, dst)

    def equal_cost_paths(self, src: NicId, dst: NicId) -> list[tuple[str, ...]]:
        """Every shortest switch path from src's leaf to dst's leaf, sorted."""
        self._known(src, dst)
        return self._topology.paths(src, dst)

    def vias(self, src: NicId, dst: NicId) -> tuple[str, ...]:
        """The switches in the middle of the src->dst equal-cost paths, sorted:
        spines, a fat tree's cores (or, within a pod, its aggregation switches)."""
        self._known(src, dst)
        return self._topology.vias(src, dst)

    def _switch_hops(self, src: NicId, dst: NicId, via: str | None) -> tuple[Endpoint, ...]:
        """Egress ports from src's leaf up to (not including) dst's leaf, on the
        first (sorted) equal-cost path that crosses `via`. Depends only on the
        two leaves; derived per call, nothing is cached per pair."""
        self._known(src, dst)
        topo = self._topology
        if via is not None:
            hops = topo.via_hops(src, dst, via)
            if hops is not None:
                return hops
            # `via` is no path's middle (a leaf's name, say): the general rule, on the rare path.
            paths = [p for p in topo.paths(src, dst) if via in p]
        else:
            count = topo.path_count(src, dst)
            if count == 1:  # one path: across its one via, or within one leaf
                vias = topo.vias(src, dst)
                return (topo.via_hops(src, dst, vias[0]) or ()) if vias else ()
            paths = [] if count == 0 else topo.paths(src, dst)
        a, b = self.attachment(src).node, self.attachment(dst).node
        if not paths:
            raise FabricError(f"no equal-cost path from {a} to {b}" + (f" via {via}" if via else ""))
        if via is None:
            raise FabricError(f"{a} to {b} has {len(paths)} equal-cost paths: name the one to use")
        return tuple(Endpoint(here, self._port_towards[(here, there)]) for here, there in itertools.pairwise(paths[0]))

    @cached_property
    def _port_towards(self) -> dict[tuple[str, str], int]:
        """(switch, neighbour switch) -> the (lowest) port that faces it. Only
        for the rare path above."""
        out: dict[tuple[str, str], int] = {}
        for here, ports in self._ports.items():
            for port, link in sorted(ports.items(), reverse=True):
                if not link.is_access:
                    out[(here, link.peer(here).node)] = port
        return out

    def warm(self) -> None:
        """Builds the per-fabric lookups (NIC ends, capacities, pod uplinks, the
        spine tier: all O(links)) so the first placements on a large fabric do
        not pay for them. Paths need nothing: they are derived per call. The
        daemon calls this at start."""
        for name in ("nics", "_nic_ends", "_nic_names", "capacity_bps", "pod_uplinks", "spine_tier", "rails"):
            getattr(self, name)

    @cached_property
    def graph(self) -> nx.Graph:
        """Undirected graph over switch names and NIC names; edges carry `link`.
        Built on first use: routing never needs it."""
        import networkx as nx  # only for callers that want a graph; costs 0.1 s to import

        graph = nx.Graph()
        for switch in self.switches.values():
            graph.add_node(switch.name, kind="switch", tier=switch.tier.value)
        for nic in self.nics:
            graph.add_node(addressing.nic_name(nic), kind="nic", rail=nic.rail, pod=nic.pod, server=nic.server)
        for link in self.links:
            graph.add_edge(link.a.node, link.b.node, link=link, capacity_bps=link.capacity_bps)
        return graph

    def egress_path(self, src: NicId, dst: NicId, via: str | None = None) -> tuple[Endpoint, ...]:
        """Every egress a src->dst packet leaves through: the source NIC (port 0),
        each switch on the way, and the last leaf's port to dst. `via` (a
        spine, or a fat tree's core) picks among equal-cost paths."""
        # The hottest call of placement and TE: the common case in as few calls as it takes.
        ends = self._nic_ends
        s, d = ends.get(src), ends.get(dst)
        if s is not None and d is not None and via is not None:
            hops = self._topology.via_hops(src, dst, via)
            if hops is not None:
                return (s[1], *hops, d[2])
        return (self._nic_end(src)[1], *self._switch_hops(src, dst, via), self._nic_end(dst)[2])

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
            return self._ports[egress.node][egress.port]
        return self._nic_links[egress.node]

    @cached_property
    def rails(self) -> int:
        """NICs (GPUs) per server: rails 0..rails-1."""
        return max(n.rail for n in self.nics) + 1

    @cached_property
    def pod_rails(self) -> frozenset[tuple[int, int]]:
        """Every (pod, rail) that has NICs."""
        return frozenset((n.pod, n.rail) for n in self.nics)

    @property
    def gpu_count(self) -> int:
        return len(self.nics)
