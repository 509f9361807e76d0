"""Job placement: which servers and GPUs a job gets, and which spine each of
its cross-pod flows takes. Pure: state and request in, Job out.

Servers: rail-aligned (rails 0..k-1 on each server), packed into as few pods
as possible, preferring pods with headroom. Several candidate server sets
(each single pod that fits; the largest-pods-first packing; plain first-fit)
are each routed two ways (min-max greedy, and the ECMP hash) and the
placement with the lowest predicted maximum link utilization wins, fewer
pods breaking ties. Because first-fit with hashed paths is always among the
candidates, a placement is never predicted worse than that naive one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

from controller.fabric import Endpoint, Fabric, NicId
from controller.fabric import addressing as ad
from controller.te.jobs import Drains, Gpu, Job, JobRequest, validate_request
from controller.te.load import Load, drained, jobs_load, max_utilization, merged
from controller.te.paths import NoPath, assign_greedy, assign_hashed
from controller.te.patterns import ServerKey, pattern_flows


class NoCapacity(Exception):
    """The fabric cannot hold the job now; the message says what is free and where."""


@dataclass(frozen=True)
class FabricState:
    """What placement sees: jobs already placed, drains, and the live link view."""

    jobs: Mapping[str, Job] = field(default_factory=dict)
    drains: Drains = field(default_factory=Drains)
    measured_bps: Mapping[Endpoint, float] = field(default_factory=dict)


def rail_count(fabric: Fabric) -> int:
    return max(n.rail for n in fabric.nics) + 1


def gpu_usage(state: FabricState) -> tuple[dict[ServerKey, dict[int, str]], dict[ServerKey, str]]:
    """(server -> rail -> job using it, server -> job holding it exclusively)."""
    used: dict[ServerKey, dict[int, str]] = defaultdict(dict)
    exclusive: dict[ServerKey, str] = {}
    for job in state.jobs.values():
        for gpu in job.gpus:
            used[(gpu.nic.pod, gpu.nic.server)][gpu.nic.rail] = job.job_id
        if job.request.exclusive:
            for key in job.server_keys():
                exclusive[key] = job.job_id
    return used, exclusive


def _servers_by_key(fabric: Fabric) -> dict[ServerKey, str]:
    return {(s.pod, s.index): s.name for s in fabric.servers}


def available_servers(fabric: Fabric, state: FabricState, request: JobRequest) -> dict[int, list[ServerKey]]:
    """Per pod, servers (in index order) where rails 0..k-1 are free and reachable."""
    k = request.per_server(rail_count(fabric))
    used, exclusive = gpu_usage(state)
    out: dict[int, list[ServerKey]] = defaultdict(list)
    for server in fabric.servers:
        key = (server.pod, server.index)
        if key in exclusive or (request.exclusive and used.get(key)):
            continue
        rails = {nic.rail for nic in server.nics}
        if not all(r in rails and r not in used.get(key, {}) for r in range(k)):
            continue
        nics = [NicId(r, server.pod, server.index) for r in range(k)]
        if any(drained(fabric, state.drains, [Endpoint(ad.nic_name(n), 0)]) for n in nics):
            continue
        out[server.pod].append(key)
    return out


def _candidates(avail: dict[int, list[ServerKey]], m: int, max_pods: int,
                pod_load: Mapping[int, float]) -> list[list[ServerKey]]:
    candidates = [servers[:m] for _, servers in sorted(avail.items()) if len(servers) >= m]
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
    return [c for c in candidates if len({pod for pod, _ in c}) <= limit]


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
    return (f"free GPUs: {free} ({where}); servers with rails 0-{k - 1} free: {fits}")


def place(fabric: Fabric, state: FabricState, request: JobRequest, now: float) -> Job:
    validate_request(fabric, request)
    rails = rail_count(fabric)
    k, m = request.per_server(rails), request.server_count(rails)
    avail = available_servers(fabric, state, request)
    base = merged(jobs_load(fabric, state.jobs.values()), state.measured_bps)
    pod_load = _pod_uplink_load(fabric, base)
    wanted = f"{request.gpu_count} GPUs as {m} server(s) x {k}"

    if request.servers:
        by_name = {name: key for key, name in _servers_by_key(fabric).items()}
        keys = [by_name[name] for name in request.servers]
        free = {key for servers in avail.values() for key in servers}
        busy = [name for name, key in zip(request.servers, keys) if key not in free]
        if busy:
            raise NoCapacity(f"{wanted}: server(s) {', '.join(busy)} lack free, undrained rails 0-{k - 1}; "
                             + _free_summary(fabric, state, avail, k))
        candidates = [keys]
    else:
        candidates = _candidates(avail, m, request.max_pods, pod_load)
        if not candidates:
            limit = f" within {request.max_pods} pod(s)" if request.max_pods else ""
            raise NoCapacity(f"{wanted}{limit} does not fit: " + _free_summary(fabric, state, avail, k))

    floor = max_utilization(fabric, base)
    best, last_error = None, ""
    for order, servers in enumerate(candidates):
        flows = pattern_flows(request.pattern, servers, k, request.flow_gbps * 1e9)
        for assign in (assign_greedy, assign_hashed):
            try:
                placed, load = assign(fabric, state.drains, base, flows)
            except NoPath as exc:
                last_error = str(exc)
                continue
            touched = {e for f in placed for e in fabric.egress_path(f.src, f.dst, f.via or None)}
            peak = max([floor, *(load[e] / fabric.link_at(e).capacity_bps for e in touched)])
            pods = {pod for pod, _ in servers}
            # Lowest predicted peak; then fewest pods; then the pods with the most headroom.
            score = (round(peak, 9), len(pods), sum(pod_load.get(p, 0.0) for p in pods), order)
            if best is None or score < best[0]:
                best = (score, servers, placed, peak)
    if best is None:
        raise NoCapacity(f"{wanted}: no candidate has a usable path ({last_error})")
    _, servers, flows, peak = best
    gpus = tuple(Gpu(j * k + r, NicId(r, pod, idx)) for j, (pod, idx) in enumerate(sorted(servers)) for r in range(k))
    return Job(request, gpus, tuple(flows), peak, now)


def _pod_uplink_load(fabric: Fabric, load: Load) -> dict[int, float]:
    """Per pod, the load already leaving its switches' uplinks: the headroom tiebreak."""
    per_pod: dict[int, float] = defaultdict(float)
    for egress, bps in load.items():
        if egress.port and egress.node in fabric.switches:
            sw = fabric.switch(egress.node)
            if sw.pod is not None and not fabric.link_at(egress).is_access:
                per_pod[sw.pod] += bps
    return per_pod
