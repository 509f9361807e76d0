"""Job placement: which servers and GPUs a job gets, and which spine each of
its cross-pod flows takes. Pure: state and request in, Job out.

Servers are rail-aligned (the same k rails on each of the job's servers);
the rails and the candidate server sets come from te/candidates.py. Each
candidate is routed two ways (min-max greedy, and the ECMP hash; with queue
pairs, also as whole connections against per-QP flows). The lowest
predicted maximum link utilization wins; then the fewest GPUs left free on
the job's servers; then fewer pods; then headroom. First-fit with hashed
paths is always evaluated unless a candidate already sits at the floor (the
peak the fabric has before this job, which no placement goes below), so a
placement is never predicted worse than that naive one.

On a three-tier fabric the cluster comes first (te/clusters.py): a job that
one cluster has room for is placed inside it, the cluster chosen as pods
are, and everything above is done within it (first-fit included); a job no
cluster holds spans as few clusters as can, on servers chosen there. The
share of the job's demand that crosses clusters is on the Job.

Cost per request on a 16k-GPU fabric: free rails are read as arrays over the
servers (te/capacity.py); with the ledgers the intent service keeps
(FabricState.usage and .ledger) the peak and the pods' uplink loads are read
without a pass over every loaded link; and a candidate that cannot beat the
best is not routed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from controller.fabric import Endpoint, Fabric
from controller.te.candidates import (
    NoCapacity,
    available_servers,
    candidate_sets,
    choose_rails,
    free_gpus_by_pod,
    shape,
)
from controller.te.capacity import Usage, server_table
from controller.te.clusters import cross_cluster_share
from controller.te.demand import planned_flows
from controller.te.jobs import Drains, Gpu, Job, JobFlow, JobRequest, validate_request, with_qp_ports
from controller.te.load import LoadLedger, jobs_load, max_utilization, merged
from controller.te.paths import Layer, Loads, NoPath, assign_greedy, assign_hashed

__all__ = ["FabricState", "NoCapacity", "Usage", "available_servers", "choose_rails", "free_gpus_by_pod", "place"]


@dataclass(frozen=True)
class FabricState:
    """What placement sees: jobs already placed, drains, and the live link view."""

    jobs: Mapping[str, Job] = field(default_factory=dict)
    drains: Drains = field(default_factory=Drains)
    measured_bps: Mapping[Endpoint, float] = field(default_factory=dict)
    # jobs_load(jobs), when the caller keeps it up to date: recomputing it per
    # request would cost more than the placement itself.
    jobs_bps: Mapping[Endpoint, float] | None = None
    usage: Usage | None = None  # Usage.of(jobs), likewise
    # Both of the above and more, kept job by job (the service does): with it,
    # a request reads the peak and the pods' uplink loads without a pass over
    # every loaded egress of the fabric.
    ledger: LoadLedger | None = None

    def predicted(self, fabric: Fabric) -> Mapping[Endpoint, float]:
        if self.ledger is not None:
            return self.ledger.bps
        return self.jobs_bps if self.jobs_bps is not None else jobs_load(fabric, self.jobs.values())

    def base_load(self, fabric: Fabric) -> Mapping[Endpoint, float]:
        """Per egress, the larger of the placed jobs' demand and the measured rate."""
        predicted = self.predicted(fabric)
        return merged(predicted, self.measured_bps) if self.measured_bps else predicted

    def gpu_ledger(self) -> Usage:
        return self.usage if self.usage is not None else Usage.of(self.jobs.values())


class _Larger:
    """base_load() without building it: a read-through view (all placement
    reads is .get) that costs nothing per request."""

    def __init__(self, a: Mapping[Endpoint, float], b: Mapping[Endpoint, float]) -> None:
        self.a, self.b = a, b

    def get(self, egress: Endpoint, default: float = 0.0) -> float:
        return max(self.a.get(egress, default), self.b.get(egress, default))


def base_loads(fabric: Fabric, state: FabricState) -> tuple[Loads, float, dict[int, float]]:
    """(base load to read through, its peak utilization, each pod's uplink load)."""
    predicted, measured, ledger = state.predicted(fabric), state.measured_bps, state.ledger
    if ledger is None:
        base = state.base_load(fabric)
        return base, max_utilization(fabric, base), _pod_uplink_load(fabric, base)
    if not measured:
        return predicted, ledger.peak(), ledger.pod_uplink_bps()
    # Per egress the larger of the two: its peak, and per pod its uplinks' sum.
    peak, pod_load = ledger.with_measured(measured)
    return _Larger(predicted, measured), peak, pod_load


def _routings(fabric: Fabric, drains: Drains, base: Loads, flows: list[JobFlow], hashed_too: bool) -> Iterator[Any]:
    """Yields (flows with their spines, predicted peak on the links they touch)
    for min-max routing, and also for ECMP-hash routing if asked. Flows inside
    one leaf have no choice, so their load is laid down once and shared."""
    local = Layer(fabric, base)
    cross_at = []
    for i, flow in enumerate(flows):
        dst = fabric.attachment(flow.dst)
        if fabric.attachment(flow.src).node == dst.node:
            local.add((fabric.nic_egress(flow.src), dst), flow.demand_bps)  # egress_path within one leaf
        else:
            cross_at.append(i)
    cross = [flows[i] for i in cross_at]
    for assign in (assign_greedy, assign_hashed) if hashed_too else (assign_greedy,):
        placed, layer = assign(fabric, drains, local, cross)
        routed = list(flows)
        for i, flow in zip(cross_at, placed):
            routed[i] = flow
        yield routed, max(local.touched_peak(), layer.touched_peak())


def place(fabric: Fabric, state: FabricState, request: JobRequest, now: float) -> Job:
    """With queue pairs, each candidate's servers are routed as whole connections, which win where predicted
    no worse (one entry pins a connection, where QPs apart take one each, on the UDP source ports named
    here: Job.pinned_qps), and with each QP a flow of its own."""
    validate_request(fabric, request)
    k = request.per_server(fabric.rails)
    base, floor, pod_load = base_loads(fabric, state)
    choice, candidates, first_fit = candidate_sets(fabric, state, request, pod_load)
    job_rails = choice.rails

    ways = [replace(request, qps_per_connection=1)] + ([request] if request.qps_per_connection > 1 else [])
    best, last_error = None, ""
    lowest = round(floor, 9)
    nics = server_table(fabric).nics
    nic_bps = fabric.spec.rates.nic_gbps * 1e9
    for order, servers in enumerate(candidates):
        pods = {pod for pod, _ in servers}
        # Lowest predicted peak; then the fewest GPUs left free on the job's
        # servers (whole servers stay whole); then fewest pods; then the
        # pods with the most headroom.
        rest = (
            sum(choice.free.get(key, 0) for key in servers),
            len(pods),
            sum(pod_load.get(p, 0.0) for p in pods),
            order,
        )
        for way, flows_of in enumerate(ways):  # ranked right after the peak: whole connections win a tie
            ranked = (way, *rest)
            if not _may_win(best, lowest, ranked):
                continue
            flows = planned_flows(flows_of, servers, job_rails, nic_bps, nics, fabric.spec.pods_per_cluster)
            # First-fit with ECMP hashing is the naive placement; evaluating it
            # guarantees the answer is never predicted worse than that.
            routings = _routings(fabric, state.drains, base, flows, hashed_too=servers == first_fit)
            while _may_win(best, lowest, ranked):
                try:
                    placed, touched_peak = next(routings)
                except StopIteration:
                    break
                except NoPath as exc:
                    last_error = str(exc)
                    break
                peak = max(floor, touched_peak)
                score = (round(peak, 9), *ranked)
                if best is None or score < best[0]:
                    best = (score, servers, placed, peak)
    if best is None:
        raise NoCapacity(f"{shape(fabric, request)}: no candidate has a usable path ({last_error})")
    _, servers, flows, peak = best
    gpus = tuple(
        Gpu(j * k + local, nics[(rail, pod, idx)])
        for j, (pod, idx) in enumerate(sorted(servers))
        for local, rail in enumerate(job_rails)
    )
    if request.qps_per_connection > 1:
        flows = with_qp_ports(flows)  # so the switches can pin a connection's QPs apart
    return Job(request, gpus, tuple(flows), peak, now, cross_cluster_share(fabric.spec, flows))


def _may_win(best: tuple[Any, ...] | None, lowest: float, rest: tuple[Any, ...]) -> bool:
    """Once the best is at the floor (no placement is predicted below the peak
    already there), a candidate can only win on the rest of the score, which
    is known before routing: what cannot win is not routed."""
    return best is None or best[0][0] > lowest or rest < best[0][1:]


def _pod_uplink_load(fabric: Fabric, load: Mapping[Endpoint, float]) -> dict[int, float]:
    """Per pod, the load already leaving its switches' uplinks: the headroom tiebreak."""
    return {pod: sum(load.get(e, 0.0) for e in egresses) for pod, egresses in fabric.pod_uplinks.items()}
