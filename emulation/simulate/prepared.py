"""An arm made ready for the fluid model: candidate routes, the underlay's
hash, ACK routes, and how each baseline routes it in a given condition of
the fabric. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from emulation.model.fluid import link_loads
from emulation.model.sharing import Sharing
from emulation.simulate.acks import AckRoutes, ack_routes, ack_steering
from emulation.simulate.conditions import Condition
from emulation.simulate.framing import Framing, WireCost, wire_cost
from emulation.simulate.routes import Network, Routes, build_routes, ecmp_routes, tier_hashes
from emulation.simulate.traffic import Arm


@dataclass(frozen=True)
class Prepared:
    arm: Arm
    routes: Routes
    hashes: np.ndarray  # per flow and hashing tier (tier_hashes)
    acks: AckRoutes | None  # None: no link ever dies, so no ACK stream is cut
    wire: WireCost | None  # None: the flows' delivered bytes alone, the optimum's accounting

    @property
    def network(self) -> Network:
        return self.routes.network

    @cached_property
    def steered_route(self) -> np.ndarray:
        """Per flow, the route its job's placement steers it along (its pair
        entries outrank the underlay's hash), -1 where the underlay hashes it."""
        flows, by_via = self.arm.flows, self.routes.by_via
        return np.array([by_via[i].get(f.via, -1) if f.via else -1 for i, f in enumerate(flows)], dtype=np.int64)

    def underlay_route(self, capacity: np.ndarray, reserved: np.ndarray | None = None) -> np.ndarray:
        """Where the flows go without TE: a placed job's steering, else the hash
        (whose select groups skip a bucket whose port is down, or reserved)."""
        hashed = ecmp_routes(self.routes, self.hashes, self.routes.ingress_usable(capacity, reserved))
        return np.where(self.steered_route >= 0, self.steered_route, hashed)

    def stalled(self, capacity: np.ndarray, moved_via: dict[int, str] | None = None) -> np.ndarray:
        """Per flow: a TCP flow whose ACKs cross a dead link, which gets nothing."""
        if self.acks is None:
            return np.zeros(len(self.arm.flows), dtype=bool)
        flows = self.arm.flows
        steer = ack_steering([f.via for f in flows], [(f.src, f.dst) for f in flows], moved_via or {}, self.acks)
        return self.acks.stalled(capacity, steer)

    def routing(self, shares: sp.csr_matrix, capacity: np.ndarray, cap: np.ndarray, sharing: Sharing) -> Routing:
        """The flows on `shares` (delivered bytes), sharing the links by what they put on the wire."""
        if self.wire is None:
            return Routing(shares, capacity, cap, sharing)
        return Routing(self.wire.framed(shares), capacity, cap, sharing, self.wire.acks)


def prepare(network: Network, arm: Arm, links_die: bool, framed: bool = True) -> Prepared:
    pairs = [(f.src, f.dst) for f in arm.flows]
    keys = [f.key for f in arm.flows]
    acks = ack_routes(network, keys, pairs) if links_die else None
    wire = _wire(network, arm) if framed else None
    return Prepared(arm, build_routes(network, pairs), tier_hashes(keys), acks, wire)


def _wire(network: Network, arm: Arm) -> WireCost:
    fabric, index = network.fabric, network.index
    ack_ends = [(index[fabric.nic_egress(f.dst)], index[fabric.attachment(f.src)]) for f in arm.flows]
    return wire_cost(Framing(fabric.spec.emulation.mtu), [f.key[2] for f in arm.flows], ack_ends, network.size)


@dataclass(frozen=True)
class Routing:
    """A fixed routing in a fixed condition: the shares, the capacities and
    each flow's cap (a meter, or 0 for a stalled flow). Called with demands,
    the rates the flows share it at (a timeline's `Solve`). With `acks`
    (flow x link, framing.py), the links first carry the ACKs of the rates
    the flows would get without them."""

    shares: sp.csr_matrix
    capacity: np.ndarray
    cap: np.ndarray
    sharing: Sharing
    acks: sp.csr_matrix | None = None

    def __call__(self, demand: np.ndarray) -> np.ndarray:
        demand = np.minimum(demand, self.cap)
        rates = self.sharing.rates(self.shares, self.capacity, demand)
        if self.acks is None or not rates.any():
            return rates
        left = np.maximum(self.capacity - link_loads(self.acks, rates), 0.0)
        return self.sharing.rates(self.shares, left, demand)


def ecmp_routing(prep: Prepared, condition: Condition, sharing: Sharing) -> Routing:
    capacity = prep.network.capacity_without(condition.dead)
    cap = np.where(prep.stalled(capacity), 0.0, np.inf)
    return prep.routing(prep.routes.shares(prep.underlay_route(capacity)), capacity, cap, sharing)


def spray_routing(prep: Prepared, condition: Condition, sharing: Sharing) -> Routing:
    """Ideal spraying: every flow split evenly over its live paths (a sprayer
    knows a dead path; its ACKs are sprayed too, so none stalls)."""
    capacity = prep.network.capacity_without(condition.dead)
    shares = prep.routes.spray_shares(prep.routes.route_usable(capacity))
    return prep.routing(shares, capacity, np.full(len(prep.arm.flows), np.inf), sharing)
