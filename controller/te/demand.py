"""What elastic flows would send if only their NICs limited them (Hedera's
demand estimation), defined once for the two that predict it: the TE
engine (an elephant's demand) and job placement (a placed flow's rate).
Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from controller.fabric import NicId
from controller.te.jobs import JobFlow, JobRequest
from controller.te.patterns import ServerKey, pattern_flows


def planned_flows(
    request: JobRequest,
    servers: Sequence[ServerKey],
    rails: int | Sequence[int],
    nic_bps: float,
    nics: Mapping[tuple[int, int, int], NicId] | None = None,
    pods_per_cluster: int = 0,
) -> list[JobFlow]:
    """The flows a job's collective puts on these servers and rails, each at
    the rate placement predicts for it (`predicted_rates`); with
    `qps_per_connection`, that many QP flows per connection."""
    flows = pattern_flows(request.pattern, servers, rails, 0.0, nics, pods_per_cluster)
    rated = predicted_rates(flows, nic_bps, request.flow_gbps * 1e9)
    q = request.qps_per_connection
    if q == 1:
        return rated
    # Each QP its own flow, at an even share (whole bits per second, as above):
    # placed one by one, a connection's QPs may take different spines.
    return [replace(f, demand_bps=float(math.floor(f.demand_bps / q))) for f in rated for _ in range(q)]


def predicted_rates(flows: Sequence[JobFlow], nic_bps: float, ceiling_bps: float = 0.0) -> list[JobFlow]:
    """A job's flows with the rate each will get from its NICs, where every
    NIC's flows share it max-min (an all-to-all NIC sends to all its peers at
    once; a ring's, to one). `ceiling_bps`: the most any flow asks for (the
    scheduler's stated rate; 0: no more than the NIC)."""
    rates = nic_limited([f.src for f in flows], [f.dst for f in flows], nic_bps)
    cap = ceiling_bps or nic_bps
    # Whole bits per second: loads summed from such rates are exact in any
    # order, so the ledgers kept job by job equal a recount to the bit, and
    # equal loads tie the same way however they were added up.
    return [JobFlow(f.src, f.dst, float(math.floor(min(float(r), cap))), f.via) for f, r in zip(flows, rates)]


def nic_limited(srcs: list[NicId], dsts: list[NicId], nic_bps: float, rounds: int = 10) -> np.ndarray:
    """Per flow, the rate it would get if only the NICs limited it: Hedera's
    demand estimation. Senders split their NIC among flows not yet limited
    elsewhere; a receiver asked for more than its NIC gives every flow at
    least the max-min fair share and marks the cut ones receiver-limited;
    repeated to a fixed point."""
    return nic_limited_by_number(_dense(srcs), _dense(dsts), nic_bps, rounds)


def nic_limited_by_number(src: np.ndarray, dst: np.ndarray, nic_bps: float, rounds: int = 10) -> np.ndarray:
    """`nic_limited` with the NICs as numbers (equal NICs equal numbers, each
    at least 0). Arithmetic over all senders and all receivers at once."""
    if not len(src):
        return np.zeros(0)
    demand = np.zeros(len(src))
    limited = np.zeros(len(src), dtype=bool)
    n_src = int(src.max()) + 1
    for _ in range(rounds):
        before = demand.copy()
        held = np.bincount(src, weights=np.where(limited, demand, 0.0), minlength=n_src)
        free = np.bincount(src, weights=~limited, minlength=n_src)
        share = np.maximum(nic_bps - held, 0.0) / np.maximum(free, 1.0)
        demand = np.where(limited, demand, share[src])
        asked = np.bincount(dst, weights=demand)
        over = asked > nic_bps * (1 + 1e-9)
        if over[dst].any():
            _receivers_share(dst, demand, limited, over, nic_bps)
        if np.array_equal(demand, before):
            break
    return demand


def _receivers_share(
    dst: np.ndarray, demand: np.ndarray, limited: np.ndarray, over: np.ndarray, nic_bps: float
) -> None:
    """Every receiver asked for more than its NIC gives its flows max-min
    shares of it: taking its flows from the smallest, each keeps what it
    asks for while that is under an even split of what is left; from the
    first that is not, each gets that split and is receiver-limited. All
    such receivers at once, in place."""
    flows = np.flatnonzero(over[dst])
    flows = flows[np.lexsort((flows, demand[flows], dst[flows]))]  # by receiver, then demand
    receiver, asked = dst[flows], demand[flows]
    starts = np.flatnonzero(np.concatenate(([True], receiver[1:] != receiver[:-1])))
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(flows))))
    position = np.arange(len(flows)) - starts[group]
    before = np.cumsum(asked) - asked
    before -= before[starts][group]  # what the smaller flows of its receiver ask for
    left = np.bincount(group)[group] - position
    split = (nic_bps - before) / left
    stop = asked >= split
    first = np.minimum.reduceat(np.where(stop, np.arange(len(flows)), len(flows)), starts)
    cut = np.arange(len(flows)) >= first[group]
    demand[flows[cut]] = split[first[group[cut]]]
    limited[flows[cut]] = True


def _dense(nics: list[NicId]) -> np.ndarray:
    """NICs -> 0..n-1, equal NICs equal numbers."""
    numbers: dict[NicId, int] = {}
    return np.array([numbers.setdefault(n, len(numbers)) for n in nics], dtype=np.int64)
