"""Job placement: which servers and GPUs a job gets, and which spine each of
its cross-pod flows takes. Pure: state and request in, Job out.

Servers: rail-aligned (the same k rails on each of the job's servers). A job
smaller than a server goes where it fits tightest (best fit: the fewest GPUs
left free on its servers, anywhere in the fabric), so whole servers stay
whole for the jobs that need them; jobs of whole servers are packed into as
few pods as possible, preferring pods with headroom. Several candidate
server sets (the tightest single pod; the largest-pods-first packing; the
fabric's tightest servers; plain first-fit) are each routed two ways
(min-max greedy, and the ECMP hash). The lowest predicted maximum link
utilization wins; then the fewest GPUs left free on the job's servers; then
fewer pods; then headroom. First-fit with hashed paths is always evaluated
unless a candidate already sits at the floor (the peak the fabric has
before this job, which no placement goes below), so a placement is never
predicted worse than that naive one.

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

import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from controller.errors import Exhausted
from controller.fabric import Endpoint, Fabric
from controller.te.capacity import Usage, free_capacity, free_masks, server_table
from controller.te.clusters import ClusterView, cross_cluster_share, plan_clusters
from controller.te.demand import planned_flows
from controller.te.jobs import Drains, Gpu, Job, JobFlow, JobRequest, validate_request
from controller.te.load import LoadLedger, drained, jobs_load, max_utilization, merged
from controller.te.paths import Layer, Loads, NoPath, assign_greedy, assign_hashed
from controller.te.patterns import ServerKey

__all__ = ["FabricState", "NoCapacity", "Usage", "available_servers", "choose_rails", "free_gpus_by_pod", "place"]


class NoCapacity(Exhausted):
    """The fabric cannot hold the job now; the message says what is free and where."""


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


def gpu_usage(state: FabricState) -> tuple[dict[ServerKey, dict[int, str]], dict[ServerKey, str]]:
    """(server -> rail -> job using it, server -> job holding it exclusively)."""
    usage = state.gpu_ledger()
    return usage.used, usage.exclusive


def _servers_by_key(fabric: Fabric) -> dict[ServerKey, str]:
    return {(s.pod, s.index): s.name for s in fabric.servers}


def available_servers(
    fabric: Fabric, state: FabricState, request: JobRequest, rails: Sequence[int] | None = None
) -> dict[int, list[ServerKey]]:
    """Per pod, servers (in index order) where `rails` (by default 0..k-1) are
    free and reachable."""
    k = request.per_server(fabric.rails)
    wanted = set(range(k) if rails is None else rails)
    used, exclusive = gpu_usage(state)
    any_drains = bool(state.drains.switches or state.drains.links)
    out: dict[int, list[ServerKey]] = defaultdict(list)
    for server in fabric.servers:
        key = (server.pod, server.index)
        taken = used.get(key)
        if key in exclusive or (taken and (request.exclusive or wanted & taken.keys())):
            continue
        nics = [nic for nic in server.nics if nic.rail in wanted]
        if len(nics) < len(wanted):
            continue
        if any_drains and any(drained(fabric, state.drains, [fabric.nic_egress(n)]) for n in nics):
            continue
        out[server.pod].append(key)
    return out


RAIL_SET_LIMIT = 256  # beyond this many k-of-rails sets, only contiguous ones are tried


@dataclass(frozen=True)
class _Choice:
    rails: tuple[int, ...]
    avail: dict[int, list[ServerKey]]  # per pod, servers with the rails free, tightest fit first
    free: Mapping[ServerKey, int]  # free GPUs on those servers before this job
    # Three tiers: the clusters avail is confined to. Across more than one,
    # avail holds exactly the job's servers.
    clusters: tuple[int, ...] = ()


def _choose(
    fabric: Fabric, state: FabricState, request: JobRequest, pod_load: Mapping[int, float] | None = None
) -> _Choice:
    rails, k, m = fabric.rails, request.per_server(fabric.rails), request.server_count(fabric.rails)
    table = server_table(fabric)
    masks = free_masks(fabric, state.gpu_ledger(), state.drains, request.exclusive)
    free_count = table.popcount(masks)
    spec = fabric.spec
    view = ClusterView.of(spec, table.pods, free_count, pod_load or {}) if spec.clusters > 1 else None
    # Only servers with k rails free can take any rail set: the loop below runs over those.
    rows = np.flatnonzero(free_count >= k)
    free, count, pods = masks[rows], free_count[rows], table.pods[rows]
    if k >= rails:
        sets = [tuple(range(rails))]
    else:
        sets = list(itertools.combinations(range(rails), k))
        if len(sets) > RAIL_SET_LIMIT:
            sets = [tuple(range(s, s + k)) for s in range(rails - k + 1)]
    best: tuple[tuple[Any, ...], tuple[int, ...], np.ndarray, tuple[int, ...]] | None = None
    for chosen in sets:
        want = sum(1 << r for r in chosen)
        fits = np.flatnonzero((free & want) == want)
        if len(fits) < m:
            continue
        if request.max_pods:
            per_pod = np.bincount(pods[fits])
            if np.sort(per_pod)[::-1][: request.max_pods].sum() < m:
                continue
        aligned = chosen[0] % k == 0 and chosen == tuple(range(chosen[0], chosen[0] + k))
        clusters: tuple[int, ...] = ()
        if view is None:
            # Tightest fit first: the free GPUs the job's m best servers would leave.
            score: tuple[Any, ...] = (int(np.sort(count[fits])[:m].sum()), not aligned, chosen)
        else:
            # Fewest clusters first (the rails that keep the job in one), then as for pods.
            plan = plan_clusters(view, pods[fits], count[fits], m, request.max_pods)
            if plan is None:
                continue
            fits, clusters = fits[list(plan.members)], plan.clusters
            score = (*plan.key, not aligned, chosen)
        if best is None or score < best[0]:
            best = (score, chosen, fits, clusters)
    if best is None:
        return _Choice(tuple(range(k)), {}, {})
    keys = table.keys
    chosen_rows = rows[best[2]]
    free_of = dict(zip((keys[i] for i in chosen_rows.tolist()), free_count[chosen_rows].tolist()))
    avail: dict[int, list[ServerKey]] = defaultdict(list)
    for key in sorted(free_of, key=lambda key: (free_of[key], key)):
        avail[key[0]].append(key)
    return _Choice(best[1], dict(avail), free_of, best[3])


def choose_rails(
    fabric: Fabric, state: FabricState, request: JobRequest
) -> tuple[tuple[int, ...], dict[int, list[ServerKey]]]:
    """The job's rails (the same on each of its servers) and, per pod, the
    servers that have them free, best fit first: a job smaller than a server
    goes where it leaves the fewest free GPUs behind, so whole servers stay
    whole for the jobs that need them. Full-server jobs take every rail."""
    choice = _choose(fabric, state, request)
    return choice.rails, choice.avail


SINGLE_POD_CANDIDATES = 2


def _candidates(
    choice: _Choice, m: int, max_pods: int, pod_load: Mapping[int, float], measured: bool
) -> tuple[list[list[ServerKey]], list[ServerKey] | None]:
    """(candidate server sets, the first-fit set if it is allowed)."""
    avail, free = choice.avail, choice.free

    def leftover(pod: int) -> int:
        return sum(free.get(key, 0) for key in avail[pod][:m])

    # Single pods that fit: the tightest fit first (all alike for whole
    # servers), then the most headroom. A job inside one pod loads only its
    # servers' access links, which carry no placed demand while free: single
    # pods differ only in measured traffic, and without any, one candidate
    # stands for them all.
    fitting = sorted(
        (p for p, servers in avail.items() if len(servers) >= m), key=lambda p: (leftover(p), pod_load.get(p, 0.0), p)
    )
    candidates = [avail[p][:m] for p in fitting[: SINGLE_POD_CANDIDATES if measured else 1]]
    packed: list[ServerKey] = []
    for pod in sorted(avail, key=lambda p: (-len(avail[p]), pod_load.get(p, 0.0), p)):
        packed += avail[pod][: m - len(packed)]
        if len(packed) == m:
            break
    everywhere = [key for servers in avail.values() for key in servers]
    # The fabric's tightest servers wherever they are, and the naive first fit
    # (the first servers in pod, index order).
    tightest = sorted(everywhere, key=lambda key: (free.get(key, 0), key))[:m]
    first_fit = sorted(everywhere)[:m]
    for extra in (packed, tightest, first_fit):
        if len(extra) == m and extra not in candidates:
            candidates.append(extra)
    limit = max_pods or len(avail) or 1
    allowed = [c for c in candidates if len({pod for pod, _ in c}) <= limit]
    return allowed, first_fit if first_fit in allowed else None


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


def free_gpus_by_pod(fabric: Fabric, state: FabricState) -> dict[int, int]:
    """GPUs no job holds, per pod (a server held exclusively has none free)."""
    return {pod.pod: pod.free_gpus for pod in free_capacity(fabric, state.gpu_ledger()).pods}


def _free_summary(fabric: Fabric, state: FabricState, request: JobRequest) -> str:
    """What is free, counted from the ledger itself: how many servers could
    each take k of the job's GPUs, whatever rails, not only those on the
    rail set a failed search last tried."""
    k, m = request.per_server(fabric.rails), request.server_count(fabric.rails)
    free_by_pod = free_gpus_by_pod(fabric, state)
    free = sum(free_by_pod.values())
    where = ", ".join(f"pod {p}: {n}" for p, n in sorted(free_by_pod.items()) if n) or "none"
    table = server_table(fabric)
    counts = table.popcount(free_masks(fabric, state.gpu_ledger(), state.drains, request.exclusive))
    roomy = np.bincount(table.pods[counts >= k], minlength=1)
    fits = ", ".join(f"pod {p}: {n}" for p, n in enumerate(roomy.tolist()) if n) or "none"
    return f"free GPUs: {free} ({where}); servers with {k} or more GPUs free: {fits} ({m} needed on the same rails)"


def place(fabric: Fabric, state: FabricState, request: JobRequest, now: float) -> Job:
    """With queue pairs, each candidate's servers are routed as whole connections, which win where predicted
    no worse (a switch pins a connection, not its QPs: Job.pinned), and with each QP a flow of its own."""
    validate_request(fabric, request)
    rails = fabric.rails
    k, m = request.per_server(rails), request.server_count(rails)
    base, floor, pod_load = base_loads(fabric, state)
    if request.servers:
        choice = _Choice(tuple(range(k)), available_servers(fabric, state, request), {})
    else:
        choice = _choose(fabric, state, request, pod_load)
    job_rails, avail = choice.rails, choice.avail
    wanted = f"{request.gpu_count} GPUs as {m} server(s) x {k}"

    if request.servers:
        candidates, first_fit = [_named_servers(fabric, state, request, avail)], None
    elif len(choice.clusters) > 1:
        # Across clusters the servers are already chosen (te/clusters.py):
        # routed both ways, so never worse than hashing them.
        spread = sorted(key for servers in avail.values() for key in servers)
        candidates, first_fit = [spread], spread
    else:
        candidates, first_fit = _candidates(choice, m, request.max_pods, pod_load, bool(state.measured_bps))
        if not candidates:
            limit = f" within {request.max_pods} pod(s)" if request.max_pods else ""
            raise NoCapacity(f"{wanted}{limit} does not fit: " + _free_summary(fabric, state, request))

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
        raise NoCapacity(f"{wanted}: no candidate has a usable path ({last_error})")
    _, servers, flows, peak = best
    gpus = tuple(
        Gpu(j * k + local, nics[(rail, pod, idx)])
        for j, (pod, idx) in enumerate(sorted(servers))
        for local, rail in enumerate(job_rails)
    )
    return Job(request, gpus, tuple(flows), peak, now, cross_cluster_share(fabric.spec, flows))


def _named_servers(fabric: Fabric, state: FabricState, request: JobRequest, avail: Mapping[Any, Any]) -> list[Any]:
    """The servers a request names, as keys; NoCapacity if any lacks the job's free rails."""
    by_name = {name: key for key, name in _servers_by_key(fabric).items()}
    keys = [by_name[name] for name in request.servers]
    free = {key for servers in avail.values() for key in servers}
    if busy := [name for name, key in zip(request.servers, keys) if key not in free]:
        k, m = request.per_server(fabric.rails), request.server_count(fabric.rails)
        raise NoCapacity(
            f"{request.gpu_count} GPUs as {m} server(s) x {k}: server(s) {', '.join(busy)} lack free, undrained "
            f"rails 0-{k - 1}; " + _free_summary(fabric, state, request)
        )
    return keys


def _may_win(best: tuple[Any, ...] | None, lowest: float, rest: tuple[Any, ...]) -> bool:
    """Once the best is at the floor (no placement is predicted below the peak
    already there), a candidate can only win on the rest of the score, which
    is known before routing: what cannot win is not routed."""
    return best is None or best[0][0] > lowest or rest < best[0][1:]


def _pod_uplink_load(fabric: Fabric, load: Mapping[Endpoint, float]) -> dict[int, float]:
    """Per pod, the load already leaving its switches' uplinks: the headroom tiebreak."""
    return {pod: sum(load.get(e, 0.0) for e in egresses) for pod, egresses in fabric.pod_uplinks.items()}
