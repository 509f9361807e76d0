"""What a routing of the flows achieves in the fluid model: rates, aggregate,
collided uplinks. Pure and vectorised."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from emulation.model.fluid import link_loads
from emulation.simulate.prepared import Routing
from emulation.simulate.routes import Routes
from emulation.simulate.traffic import SimFlow

# An uplink is collided when its flows' natural demands exceed it by this much
# (the engine's own collision test uses the same margin).
COLLISION_MARGIN = 1.05


@dataclass(frozen=True)
class Outcome:
    """A routing's rates and what they add up to."""

    rates: np.ndarray
    aggregate_bps: float
    collided_uplinks: int


def natural_demand(routes: Routes, flows: Sequence[SimFlow], active: np.ndarray) -> np.ndarray:
    """What each active flow would get if only the NICs at its two ends
    limited it, each NIC split evenly among its flows (capped by the flow's
    own demand): the demand a collision is judged by."""
    capacity = routes.network.capacity
    src, dst = routes.src_egress, routes.dst_egress
    out_count = np.bincount(src[active], minlength=len(capacity))
    in_count = np.bincount(dst[active], minlength=len(capacity))
    demand = np.fromiter((f.demand_bps for f in flows), dtype=float, count=len(flows))
    share = np.minimum(capacity[src] / np.maximum(out_count[src], 1), capacity[dst] / np.maximum(in_count[dst], 1))
    return np.where(active, np.minimum(demand, share), 0.0)


def collided_uplinks(shares: sp.csr_matrix, natural: np.ndarray, is_uplink: np.ndarray, capacity: np.ndarray) -> int:
    """Uplinks carrying two or more flows whose natural demands exceed them.
    A sprayed flow counts on every uplink it touches with its share there."""
    carrying = np.asarray((shares > 0).T @ (natural > 0).astype(float)).ravel()
    demand = link_loads(shares, natural)
    hot = is_uplink & (carrying >= 2) & (demand > COLLISION_MARGIN * capacity)
    return int(hot.sum())


def outcome(routing: Routing, demand: np.ndarray, natural: np.ndarray, is_uplink: np.ndarray) -> Outcome:
    rates = routing(demand)
    return Outcome(rates, float(rates.sum()), collided_uplinks(routing.shares, natural, is_uplink, routing.capacity))
