"""The optimum of a job's iteration: a true lower bound on its time. Pure.

The job's transfers alone on the live fabric (the dead links of the
condition; drains are a preference, not lost capacity), every flow free to
split over all its paths. Every flow of an iteration carries the same bits
b, so the fastest schedule runs them all at one constant rate r (averaging
any schedule over time gives such a one) and the bound is b / r*, with r*
the max concurrent flow: the lowest rate of the splittable max-min
allocation (its first level).

- `lp`: r* exactly, by the progressive-filling LP (HiGHS, emulation.model);
  used while the job has at most LP_MAX_FLOWS flows.
- `cuts`: above that, the tightest of the cut bounds: each NIC's transmit
  and receive side, each leaf's uplinks (and the spine ports down to it)
  for the flows leaving (entering) it, and each pod's uplinks for the
  flows leaving (entering) the pod. Each is a lower bound; on a healthy
  non-blocking fabric the NIC cut is tight.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controller.fabric import Fabric, NicId, Tier
from emulation.model.optimum import Outage, Units, concurrent_time_s
from emulation.simulate.routes import Network

LP_MAX_FLOWS = 128


@dataclass(frozen=True)
class JobBound:
    time_s: float  # the iteration can take no less
    method: str  # "lp" or "cuts"


class Cuts:
    """The fabric's cuts as egress indices: each leaf's and each pod's way
    out (its uplinks) and way in (the ports above that face it)."""

    def __init__(self, network: Network) -> None:
        fabric = network.fabric
        self.network = network
        self.fabric = fabric
        self.out: dict[tuple[str, object], list[int]] = {}
        self.into: dict[tuple[str, object], list[int]] = {}
        for leaf in (s.name for s in fabric.switches_in(Tier.LEAF)):
            for link in fabric.ports(leaf).values():
                if not link.is_access:
                    ours = link.a if link.a.node == leaf else link.b
                    self.out.setdefault(("leaf", leaf), []).append(network.index[ours])
                    self.into.setdefault(("leaf", leaf), []).append(network.index[link.peer(leaf)])
        for pod, ups in fabric.pod_uplinks.items():
            self.out[("pod", pod)] = [network.index[e] for e in ups]
            self.into[("pod", pod)] = [network.index[fabric.link_at(e).peer(e.node)] for e in ups]

    def time_s(self, pairs: Sequence[tuple[NicId, NicId]], bits: float, capacity: np.ndarray) -> float:
        """The slowest cut: the bits that must cross it over its live capacity."""
        fabric, index = self.fabric, self.network.index
        crossing: Counter[tuple[str, tuple[str, object]]] = Counter()
        nic_out = Counter(index[fabric.nic_egress(src)] for src, _ in pairs)
        nic_in = Counter(index[fabric.attachment(dst)] for _, dst in pairs)
        for src, dst in pairs:
            a, b = fabric.attachment(src).node, fabric.attachment(dst).node
            if a != b:
                crossing[("out", ("leaf", a))] += 1
                crossing[("in", ("leaf", b))] += 1
            if src.pod != dst.pod:
                crossing[("out", ("pod", src.pod))] += 1
                crossing[("in", ("pod", dst.pod))] += 1
        cuts = [(count, float(capacity[e])) for e, count in [*nic_out.items(), *nic_in.items()]]
        for (way, group), count in crossing.items():
            egresses = (self.out if way == "out" else self.into)[group]
            cuts.append((count, float(capacity[egresses].sum())))
        return max((count * bits / cap if cap > 0 else math.inf for count, cap in cuts), default=0.0)


def lp_time_s(fabric: Fabric, pairs: Sequence[tuple[NicId, NicId]], bits: float, dead: Sequence[str]) -> float:
    return concurrent_time_s(fabric, pairs, bits, units=Units.REAL, outage=Outage.of(links=dead))


def job_bound(
    cuts: Cuts, pairs: Sequence[tuple[NicId, NicId]], bits: float, dead: Sequence[str], capacity: np.ndarray
) -> JobBound:
    if len(pairs) <= LP_MAX_FLOWS:
        return JobBound(lp_time_s(cuts.fabric, pairs, bits, dead), "lp")
    return JobBound(cuts.time_s(pairs, bits, capacity), "cuts")
