"""Job placement: which servers and GPUs a job gets, and which spine each of
its cross-pod flows takes. Pure: state and request in, Job out.

Servers: rail-aligned (the same k rails on each of the job's servers),
packed into as few pods as possible, preferring pods with headroom. A job
smaller than a server takes free rails of partly used servers first (best
fit), so small jobs do not strand whole servers' worth of GPUs. Several candidate server sets
(each single pod that fits; the largest-pods-first packing; plain first-fit)
are each routed two ways (min-max greedy, and the ECMP hash) and the
placement with the lowest predicted maximum link utilization wins, fewer
pods breaking ties. Because first-fit with hashed paths is always among the
candidates, a placement is never predicted worse than that naive one.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.fabric import Endpoint, Fabric, NicId
from controller.te.jobs import Drains, Gpu, Job, JobFlow, JobRequest, validate_request
from controller.te.load import drained, jobs_load, max_utilization, merged
from controller.te.paths import Layer, NoPath, assign_greedy, assign_hashed
from controller.te.patterns import ServerKey, pattern_flows


class NoCapacity(Exception):
    """The fabric cannot hold the job now; the message says what is free and where."""


@dataclass(frozen=True)
class FabricState:
    """What placement sees: jobs already placed, drains, and the live link view."""

    jobs: Mapping[str, Job] = field(default_factory=dict)
    drains: Drains = field(default_factory=Drains)
    measured_bps: Mapping[Endpoint, float] = field(default_factory=dict)
    # jobs_load(jobs), when the caller keeps it up to date (the service does):
    # recomputing it per request would cost more than the placement itself.
    jobs_bps: Mapping[Endpoint, float] | None = None
    usage: Usage | None = None  # Usage.of(jobs), likewise

    def base_load(self, fabric: Fabric) -> Mapping[Endpoint, float]:
        predicted = self.jobs_bps if self.jobs_bps is not None else jobs_load(fabric, self.jobs.values())
        return merged(predicted, self.measured_bps) if self.measured_bps else predicted


@dataclass
class Usage:
    """Which job holds each GPU, and which servers are held exclusively. A
    ledger the service updates per job instead of rebuilding per request."""

    used: dict[ServerKey, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))
    exclusive: dict[ServerKey, str] = field(default_factory=dict)

    @classmethod
    def of(cls, jobs) -> Usage:
        usage = cls()
        for job in jobs:
            usage.add(job)
        return usage

    def add(self, job: Job) -> None:
        job_id, used = job.job_id, self.used
        for gpu in job.gpus:
            used[(gpu.nic.pod, gpu.nic.server)][gpu.nic.rail] = job_id
        if job.request.exclusive:
            for key in job.server_keys():
                self.exclusive[key] = job_id

    def remove(self, job: Job) -> None:
        for gpu in job.gpus:
            key = (gpu.nic.pod, gpu.nic.server)
            rails = self.used.get(key, {})
            rails.pop(gpu.nic.rail, None)
            if not rails:
                self.used.pop(key, None)
            if self.exclusive.get(key) == job.job_id:
                del self.exclusive[key]


def gpu_usage(state: FabricState) -> tuple[dict[ServerKey, dict[int, str]], dict[ServerKey, str]]:
    """(server -> rail -> job using it, server -> job holding it exclusively)."""
    usage = state.usage if state.usage is not None else Usage.of(state.jobs.values())
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


def free_rail_masks(fabric: Fabric, state: FabricState, exclusive_request: bool) -> dict[ServerKey, int]:
    """Per server, its free and reachable rails as a bit mask (rail r = bit r);
    a server held exclusively, or any partly used one for an exclusive request, has none."""
    used, exclusive = gpu_usage(state)
    any_drains = bool(state.drains.switches or state.drains.links)
    out = {}
    for server in fabric.servers:
        key = (server.pod, server.index)
        taken = used.get(key, {})
        if key in exclusive or (exclusive_request and taken):
            out[key] = 0
            continue
        mask = 0
        for nic in server.nics:
            if nic.rail not in taken and not (any_drains and drained(fabric, state.drains, [fabric.nic_egress(nic)])):
                mask |= 1 << nic.rail
        out[key] = mask
    return out


RAIL_SET_LIMIT = 256  # beyond this many k-of-rails sets, only contiguous ones are tried


def choose_rails(
    fabric: Fabric, state: FabricState, request: JobRequest
) -> tuple[tuple[int, ...], dict[int, list[ServerKey]]]:
    """The job's rails (the same on each of its servers) and, per pod, the
    servers that have them free, best fit first: a job smaller than a server
    goes where it leaves the fewest free GPUs behind, so whole servers stay
    whole for the jobs that need them. Full-server jobs take every rail."""
    rails, k, m = fabric.rails, request.per_server(fabric.rails), request.server_count(fabric.rails)
    if k >= rails:
        return tuple(range(rails)), available_servers(fabric, state, request, range(rails))
    masks = free_rail_masks(fabric, state, request.exclusive)
    keys = list(masks)
    free = np.array([masks[key] for key in keys], dtype=np.int64)
    free_count = np.array([bin(mask).count("1") for mask in free.tolist()], dtype=np.int64)
    pods = np.array([pod for pod, _ in keys], dtype=np.int64)
    sets = list(itertools.combinations(range(rails), k))
    if len(sets) > RAIL_SET_LIMIT:
        sets = [tuple(range(s, s + k)) for s in range(rails - k + 1)]
    best: tuple[tuple, tuple[int, ...], np.ndarray] | None = None
    for chosen in sets:
        want = sum(1 << r for r in chosen)
        fits = np.flatnonzero((free & want) == want)
        per_pod = np.bincount(pods[fits])
        if np.sort(per_pod)[::-1][: request.max_pods or None].sum() < m:
            continue
        # Tightest fit first: the free GPUs the job's m best servers would leave.
        leftover = int(np.sort(free_count[fits])[:m].sum())
        aligned = chosen[0] % k == 0 and chosen == tuple(range(chosen[0], chosen[0] + k))
        score = (leftover, not aligned, chosen)
        if best is None or score < best[0]:
            best = (score, chosen, fits)
    if best is None:
        return tuple(range(k)), {}
    avail: dict[int, list[ServerKey]] = defaultdict(list)
    for i in sorted(best[2].tolist(), key=lambda i: (free_count[i], keys[i])):
        avail[keys[i][0]].append(keys[i])
    return best[1], dict(avail)


SINGLE_POD_CANDIDATES = 2


def _candidates(
    avail: dict[int, list[ServerKey]], m: int, max_pods: int, pod_load: Mapping[int, float], measured: bool
) -> tuple[list[list[ServerKey]], list[ServerKey] | None]:
    """(candidate server sets, the first-fit set if it is allowed)."""
    # Single pods that fit, the ones with the most headroom first. A job inside
    # one pod loads only its servers' access links, which carry no placed
    # demand while free: single pods differ only in measured traffic, and
    # without any, one candidate stands for them all.
    fitting = sorted((p for p, servers in avail.items() if len(servers) >= m), key=lambda p: (pod_load.get(p, 0.0), p))
    candidates = [avail[p][:m] for p in fitting[: SINGLE_POD_CANDIDATES if measured else 1]]
    packed: list[ServerKey] = []
    for pod in sorted(avail, key=lambda p: (-len(avail[p]), pod_load.get(p, 0.0), p)):
        packed += avail[pod][: m - len(packed)]
        if len(packed) == m:
            break
    first_fit = [key for _, servers in sorted(avail.items()) for key in servers][:m]
    for extra in (packed, first_fit):
        if len(extra) == m and extra not in candidates:
            candidates.append(extra)
    limit = max_pods or len(avail) or 1
    allowed = [c for c in candidates if len({pod for pod, _ in c}) <= limit]
    return allowed, first_fit if first_fit in allowed else None


def _routings(fabric: Fabric, drains: Drains, base: Mapping[Endpoint, float], flows: list[JobFlow], hashed_too: bool):
    """Yields (flows with their spines, predicted peak on the links they touch)
    for min-max routing, and also for ECMP-hash routing if asked. Flows inside
    one leaf have no choice, so their load is laid down once and shared."""
    local = Layer(fabric, base)
    cross_at = []
    for i, flow in enumerate(flows):
        if fabric.attachment(flow.src).node == fabric.attachment(flow.dst).node:
            local.add(fabric.egress_path(flow.src, flow.dst), flow.demand_bps)
        else:
            cross_at.append(i)
    cross = [flows[i] for i in cross_at]
    for assign in (assign_greedy, assign_hashed) if hashed_too else (assign_greedy,):
        # A Layer is not a Mapping, but assign_* only read their base through
        # .get(egress, 0.0), which a Layer answers: layers stack.
        placed, layer = assign(fabric, drains, local, cross)
        routed = list(flows)
        for i, flow in zip(cross_at, placed):
            routed[i] = flow
        yield routed, max(local.touched_peak(), layer.touched_peak())


def free_gpus_by_pod(fabric: Fabric, state: FabricState) -> dict[int, int]:
    """GPUs no job holds, per pod (a server held exclusively has none free)."""
    used, exclusive = gpu_usage(state)
    free_by_pod: dict[int, int] = defaultdict(int)
    for server in fabric.servers:
        key = (server.pod, server.index)
        if key not in exclusive:
            free_by_pod[server.pod] += sum(1 for nic in server.nics if nic.rail not in used.get(key, {}))
    return free_by_pod


def _free_summary(fabric: Fabric, state: FabricState, avail: dict[int, list[ServerKey]], k: int) -> str:
    free_by_pod = free_gpus_by_pod(fabric, state)
    free = sum(free_by_pod.values())
    where = ", ".join(f"pod {p}: {n}" for p, n in sorted(free_by_pod.items()) if n) or "none"
    fits = ", ".join(f"pod {p}: {len(s)}" for p, s in sorted(avail.items()) if s) or "none"
    return f"free GPUs: {free} ({where}); servers with {k} rail-aligned GPUs free: {fits}"


def place(fabric: Fabric, state: FabricState, request: JobRequest, now: float) -> Job:
    validate_request(fabric, request)
    rails = fabric.rails
    k, m = request.per_server(rails), request.server_count(rails)
    if request.servers:
        job_rails, avail = tuple(range(k)), available_servers(fabric, state, request)
    else:
        job_rails, avail = choose_rails(fabric, state, request)
    base = state.base_load(fabric)
    pod_load = _pod_uplink_load(fabric, base)
    wanted = f"{request.gpu_count} GPUs as {m} server(s) x {k}"

    if request.servers:
        by_name = {name: key for key, name in _servers_by_key(fabric).items()}
        keys = [by_name[name] for name in request.servers]
        free = {key for servers in avail.values() for key in servers}
        busy = [name for name, key in zip(request.servers, keys) if key not in free]
        if busy:
            raise NoCapacity(
                f"{wanted}: server(s) {', '.join(busy)} lack free, undrained rails 0-{k - 1}; "
                + _free_summary(fabric, state, avail, k)
            )
        candidates, first_fit = [keys], None
    else:
        candidates, first_fit = _candidates(avail, m, request.max_pods, pod_load, bool(state.measured_bps))
        if not candidates:
            limit = f" within {request.max_pods} pod(s)" if request.max_pods else ""
            raise NoCapacity(f"{wanted}{limit} does not fit: " + _free_summary(fabric, state, avail, k))

    floor = max_utilization(fabric, base)
    best, last_error = None, ""
    for order, servers in enumerate(candidates):
        flows = pattern_flows(request.pattern, servers, job_rails, request.flow_gbps * 1e9)
        # First-fit with ECMP hashing is the naive placement; evaluating it
        # guarantees the answer is never predicted worse than that.
        routings = _routings(fabric, state.drains, base, flows, hashed_too=servers == first_fit)
        while True:
            try:
                placed, touched_peak = next(routings)
            except StopIteration:
                break
            except NoPath as exc:
                last_error = str(exc)
                break
            peak = max(floor, touched_peak)
            pods = {pod for pod, _ in servers}
            # Lowest predicted peak; then fewest pods; then the pods with the most headroom.
            score = (round(peak, 9), len(pods), sum(pod_load.get(p, 0.0) for p in pods), order)
            if best is None or score < best[0]:
                best = (score, servers, placed, peak)
    if best is None:
        raise NoCapacity(f"{wanted}: no candidate has a usable path ({last_error})")
    _, servers, flows, peak = best
    gpus = tuple(
        Gpu(j * k + local, NicId(rail, pod, idx))
        for j, (pod, idx) in enumerate(sorted(servers))
        for local, rail in enumerate(job_rails)
    )
    return Job(request, gpus, tuple(flows), peak, now)


def _pod_uplink_load(fabric: Fabric, load: Mapping[Endpoint, float]) -> dict[int, float]:
    """Per pod, the load already leaving its switches' uplinks: the headroom tiebreak."""
    return {pod: sum(load.get(e, 0.0) for e in egresses) for pod, egresses in fabric.pod_uplinks.items()}
