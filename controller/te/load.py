"""Link load: bits per second leaving each egress port, against its capacity.

Keys are egress `Endpoint`s (switch, port), or (NIC name, 0) for a NIC's
transmit side: links are full duplex, so each direction is its own resource.
Loads are in the real fabric's units (Link.capacity_bps).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from controller.fabric import Endpoint, Fabric, Link
from controller.te.jobs import Drains, Job, JobFlow

Load = dict[Endpoint, float]
# A copy of the measured load, with its rows over the egresses and their values.
Indexed = tuple[Mapping[Endpoint, float], np.ndarray, np.ndarray]


def flow_path(fabric: Fabric, flow: JobFlow) -> tuple[Endpoint, ...]:
    if not flow.via:
        # Within one leaf (most of a large job's flows): the NIC, then the
        # leaf's port to the other NIC, without the general path derivation.
        dst = fabric.attachment(flow.dst)
        if fabric.attachment(flow.src).node == dst.node:
            return (fabric.nic_egress(flow.src), dst)
    return fabric.egress_path(flow.src, flow.dst, flow.via or None)


# Below this an egress carries nothing: what adding and removing fractional
# rates leaves behind in floating point (a thousandth of a bit per second on
# a 400G link), which must not read as a job's load after it is released.
EMPTY_BPS = 1.0


def jobs_load(fabric: Fabric, jobs: Iterable[Job]) -> Load:
    load: Load = defaultdict(float)
    for job in jobs:
        add_job(fabric, load, job)
    return load


def add_job(fabric: Fabric, load: Load, job: Job, sign: float = 1.0) -> set[Endpoint]:
    """Adds (sign=1) or removes (sign=-1) a job's demand; emptied egresses are
    dropped. Returns the egresses it touched."""
    touched: set[Endpoint] = set()
    for flow in job.flows:
        path = flow_path(fabric, flow)
        touched.update(path)
        for egress in path:
            value = load.get(egress, 0.0) + sign * flow.demand_bps
            if value >= EMPTY_BPS:
                load[egress] = value
            else:
                load.pop(egress, None)
    return touched


class LoadLedger:
    """The placed jobs' load (`bps`, what `jobs_load` returns), kept in step
    job by job, with the two figures placement reads on every request held
    as arrays over the fabric's egresses: the peak utilization (one max over
    an array instead of a pass over every loaded egress) and each pod's
    uplink load."""

    def __init__(self, fabric: Fabric, jobs: Iterable[Job] = ()) -> None:
        self.fabric = fabric
        self.bps: Load = {}
        capacity = fabric.capacity_bps
        self._row = {egress: i for i, egress in enumerate(capacity)}
        self._capacity = np.fromiter(capacity.values(), dtype=np.float64, count=len(capacity))
        self._bps = np.zeros(len(capacity))
        uplinks = [(pod, egress) for pod, egresses in fabric.pod_uplinks.items() for egress in egresses]
        self._uplink_rows = np.array([self._row[e] for _, e in uplinks], dtype=np.int64)
        self._uplink_pods = np.array([pod for pod, _ in uplinks], dtype=np.int64)
        self._pods = sorted(fabric.pod_uplinks)
        self.uplink_pod: dict[Endpoint, int] = {egress: pod for pod, egress in uplinks}
        self._pod_uplink_capacity = self._per_pod(self._capacity)
        # The last two copies of the measured load indexed, the newest first:
        # the telemetry thread indexes a copy before placements see it, and a
        # placement may still be reading the one before (ingest.py).
        self._measured: tuple[Indexed, ...] = ()
        for job in jobs:
            self.add(job)

    def reset(self, jobs: Iterable[Job]) -> None:
        self.bps = {}
        self._bps[:] = 0.0
        for job in jobs:
            self.add(job)

    def add(self, job: Job, sign: float = 1.0) -> None:
        """Adds (sign=1) or removes (sign=-1) a job's demand."""
        load = self.bps
        touched = add_job(self.fabric, load, job, sign)
        if touched:
            rows = np.fromiter((self._row[e] for e in touched), dtype=np.int64, count=len(touched))
            self._bps[rows] = np.fromiter((load.get(e, 0.0) for e in touched), dtype=np.float64, count=len(touched))

    def peak(self) -> float:
        """max_utilization(fabric, bps)."""
        return float((self._bps / self._capacity).max()) if self.bps else 0.0

    def pod_uplink_bps(self) -> dict[int, float]:
        """Per pod, the load leaving its switches' uplinks."""
        return self._per_pod(self._bps)

    def pod_uplink_utilization(self) -> dict[int, float]:
        """Per pod, that load over its uplinks' capacity."""
        load = self.pod_uplink_bps()
        return {pod: load[pod] / capacity for pod, capacity in self._pod_uplink_capacity.items() if capacity}

    def with_measured(self, measured: Mapping[Endpoint, float]) -> tuple[float, dict[int, float]]:
        """(peak utilization, each pod's uplink load) of the per-egress larger
        of the jobs' demand and `measured`: what placement reads under live
        telemetry, over arrays instead of a lookup per uplink (16,384 of
        them at 16k GPUs, on every placement)."""
        found = next((f for f in self._measured if f[0] is measured), None) or self.index_measured(measured)
        _, index, values = found
        larger = self._bps.copy()
        np.maximum.at(larger, index, values)
        peak = float((larger / self._capacity).max()) if len(larger) else 0.0
        return peak, self._per_pod(larger)

    def index_measured(self, measured: Mapping[Endpoint, float]) -> Indexed:
        """`measured` as (rows, values) over the egresses, kept for the same
        mapping: the live load is one copy for many placements, and the
        telemetry thread indexes each new copy before a placement reads it."""
        rows = np.fromiter((self._row.get(e, -1) for e in measured), dtype=np.int64, count=len(measured))
        values = np.fromiter(measured.values(), dtype=np.float64, count=len(measured))
        known = rows >= 0
        found = (measured, rows[known], values[known])
        self._measured = (found, *self._measured[:1])  # one assignment: a placement reads the old pair or this one
        return found

    def _per_pod(self, per_egress: np.ndarray) -> dict[int, float]:
        """Per pod, the sum of `per_egress` (an array over the egresses) over its uplinks."""
        if not self._pods:
            return {}
        sums = np.bincount(self._uplink_pods, weights=per_egress[self._uplink_rows], minlength=max(self._pods) + 1)
        return {pod: float(sums[pod]) for pod in self._pods}


def max_utilization(fabric: Fabric, load: Mapping[Endpoint, float]) -> float:
    # map() rather than a generator: this runs over every loaded egress of a
    # 16k-GPU fabric on each placement, and is 3x faster this way.
    capacity = fabric.capacity_bps
    return max(map(operator.truediv, load.values(), map(capacity.__getitem__, load.keys())), default=0.0)


def merged(*loads: Mapping[Endpoint, float]) -> Load:
    """Per egress, the largest of the loads (predicted jobs vs measured traffic:
    measured includes the jobs' own traffic, so adding them would double count)."""
    out: Load = defaultdict(float)
    for load in loads:
        for egress, bps in load.items():
            out[egress] = max(out[egress], bps)
    return out


def link_name(fabric: Fabric, link: Link) -> str:
    """One stable name per link: its switch-side end for access links, else the
    lexicographically smaller 'switch:port' of its two ends."""
    ends = [e for e in (link.a, link.b) if e.port]
    return min(f"{e.node}:{e.port}" for e in ends)


def drained(fabric: Fabric, drains: Drains, egresses: Iterable[Endpoint]) -> str:
    """The first drained element on a path ('' if none)."""
    for egress in egresses:
        if egress.port and egress.node in drains.switches:
            return egress.node
        link = fabric.link_at(egress)
        peer = link.peer(egress.node)
        if peer.port and peer.node in drains.switches:
            return peer.node
        if drains.links and link_name(fabric, link) in drains.links:
            return link_name(fabric, link)
    return ""
