"""A workload on a fabric -> the flows it puts there, with their 5-tuples. Pure.

Two arms per workload. For a permutation or an incast both are the same
flows. For a job mix they differ in where the jobs go:

- baseline: what a fabric without Railyard does, network-blind first-fit
  placement (the first free servers in order) with every flow left to the
  underlay's hash;
- railyard: the same requests placed one by one through the real placement
  code, the way the intent service calls it; the placed flows carry the
  spine their job steers them across.

Source ports are drawn from the seed as the emulation's traffic draws them
(emulation/traffic/iperf.py make_flows), so the same seed gives the same
5-tuples, hence the same hash input, as an emulated scenario.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.fabric import Fabric, NicId
from controller.fabric import addressing as ad
from controller.fabric.model import FabricError
from controller.te.demand import planned_flows
from controller.te.jobs import Drains, Gpu, Job, JobFlow, JobRequest, Pattern
from controller.te.load import Load, add_job
from controller.te.placement import FabricState, NoCapacity, Usage, available_servers, place
from controller.te.view import FlowKey
from emulation.model.pairs import BYSTANDER_PORT, flow_ports, incast_pairs, permutation_pairs
from emulation.simulate.workload import Workload, WorkloadError


@dataclass(frozen=True)
class SimFlow:
    key: FlowKey
    src: NicId
    dst: NicId
    demand_bps: float  # inf: elastic (TCP)
    start_s: float = 0.0
    via: str = ""  # the spine a placed job steers it across; "": the underlay hashes it


@dataclass(frozen=True)
class Arm:
    """One way of running the workload: its flows and, for a job mix, its jobs."""

    flows: tuple[SimFlow, ...]
    jobs: Mapping[str, Job] = field(default_factory=dict)
    gpus_used: int = 0
    refused: int = 0  # job requests that did not fit


def flow_keys(pairs: Sequence[tuple[NicId, NicId]], protocol: str, seed: int) -> list[FlowKey]:
    """The 5-tuples make_flows gives the emulated flows of the same pairs and seed."""
    return [
        (ad.nic_ip(src), ad.nic_ip(dst), protocol, sport, dport)
        for (src, dst), (sport, dport) in zip(pairs, flow_ports(pairs, protocol, seed))
    ]


def check_events(fabric: Fabric, workload: Workload) -> None:
    """Every link event names a link between two switches of this fabric."""
    for i, event in enumerate(workload.events):
        switch, _, port = event.link.rpartition(":")
        try:
            link = fabric.ports(switch)[int(port)]
        except (FabricError, KeyError, ValueError):
            link = None
        if link is None or link.is_access:
            examples = [f"{e.node}:{e.port}" for ups in fabric.pod_uplinks.values() for e in ups][:4]
            raise WorkloadError(
                f"events[{i}].link_down",
                f"{event.link!r} is not a link between two switches of fabric {fabric.spec.name!r}",
                f"a switch port facing another switch, e.g. {', '.join(examples)}",
            )


def build_arms(fabric: Fabric, workload: Workload, seed: int) -> tuple[Arm, Arm]:
    """(baseline, railyard) for the workload on the fabric."""
    check_events(fabric, workload)
    nic_bps = fabric.spec.rates.nic_gbps * 1e9
    demand = (workload.rate_gbps * 1e9 if workload.rate_gbps else nic_bps) if workload.protocol == "udp" else math.inf
    if workload.pattern == "permutation":
        pairs = permutation_pairs(fabric, WorkloadError)
        keys = flow_keys(pairs, workload.protocol, seed)
        arm = Arm(tuple(SimFlow(k, s, d, demand) for k, (s, d) in zip(keys, pairs)))
        return arm, arm
    if workload.pattern == "incast":
        senders, bystander = incast_pairs(fabric, workload.fan_in, seed, WorkloadError)
        keys = flow_keys(senders, workload.protocol, seed)
        flows = [SimFlow(k, s, d, demand, workload.start_s) for k, (s, d) in zip(keys, senders)]
        if workload.bystander and bystander:
            ((src, dst, _, sport, _),) = flow_keys([bystander], "tcp", seed + 1)
            flows.append(SimFlow((src, dst, "tcp", sport, BYSTANDER_PORT), *bystander, math.inf))
        arm = Arm(tuple(flows))
        return arm, arm
    requests = job_requests(fabric, workload, seed)
    return first_fit_arm(fabric, requests, workload, seed, demand), railyard_arm(
        fabric, requests, workload, seed, demand
    )


def job_requests(fabric: Fabric, workload: Workload, seed: int) -> list[JobRequest]:
    """Jobs drawn from the mix until `fill` of the GPUs are asked for."""
    mix = workload.jobs
    rails = fabric.rails
    for size, _ in mix.sizes:
        k = min(size, rails)
        if size > fabric.gpu_count or size % k:
            raise WorkloadError(
                f"traffic.sizes.{size}",
                f"{size} GPUs do not fit fabric {fabric.spec.name!r} as whole servers",
                f"up to {rails} GPUs, or a multiple of {rails} up to {fabric.gpu_count}",
            )
    rng = random.Random(seed)
    sizes, size_weights = zip(*mix.sizes)
    patterns, pattern_weights = zip(*mix.collectives)
    target = mix.fill * fabric.gpu_count
    smallest = min(sizes)
    out: list[JobRequest] = []
    asked = 0
    misses = 0
    while asked < target and fabric.gpu_count - asked >= smallest and misses < 100:
        size = rng.choices(sizes, size_weights)[0]
        pattern = rng.choices(patterns, pattern_weights)[0]
        if asked + size > fabric.gpu_count:
            misses += 1
            continue
        if pattern is Pattern.ALL_TO_ALL and size > mix.all_to_all_max_gpus:
            pattern = Pattern.RING
        out.append(JobRequest(f"job-{len(out):04d}", size, pattern, min(mix.flow_gbps, fabric.spec.rates.nic_gbps)))
        asked += size
    return out


def _job_flows(jobs: Sequence[tuple[str, Sequence[JobFlow]]], workload: Workload, seed: int, demand: float):
    pairs = [(f.src, f.dst) for _, flows in jobs for f in flows]
    vias = [f.via for _, flows in jobs for f in flows]
    keys = flow_keys(pairs, workload.protocol, seed)
    return tuple(SimFlow(k, s, d, demand, 0.0, via) for k, (s, d), via in zip(keys, pairs, vias))


def first_fit_arm(fabric: Fabric, requests: Sequence[JobRequest], workload: Workload, seed: int, demand: float) -> Arm:
    """Network-blind first-fit: the first servers (in pod, index order) with the
    rails free, flows hashed by the underlay."""
    usage = Usage()
    placed: list[tuple[str, list[JobFlow]]] = []
    used = refused = 0
    rails = fabric.rails
    for request in requests:
        k, m = request.per_server(rails), request.server_count(rails)
        avail = available_servers(fabric, FabricState(usage=usage), request)
        servers = [key for _, keys in sorted(avail.items()) for key in keys][:m]
        if len(servers) < m:
            refused += 1
            continue
        flows = planned_flows(request, servers, k, fabric.spec.rates.nic_gbps * 1e9)
        gpus = tuple(
            Gpu(j * k + r, NicId(r, pod, idx)) for j, (pod, idx) in enumerate(sorted(servers)) for r in range(k)
        )
        usage.add(Job(request, gpus, tuple(flows), 0.0, 0.0))
        placed.append((request.job_id, flows))
        used += request.gpu_count
    return Arm(_job_flows(placed, workload, seed, demand), {}, used, refused)


def railyard_arm(fabric: Fabric, requests: Sequence[JobRequest], workload: Workload, seed: int, demand: float) -> Arm:
    """Each request through `place`, with the state the intent service keeps
    between requests (jobs so far, their predicted load, the GPU ledger)."""
    jobs: dict[str, Job] = {}
    jobs_bps: Load = {}
    usage = Usage()
    used = refused = 0
    for request in requests:
        state = FabricState(jobs, Drains(), {}, jobs_bps, usage)
        try:
            job = place(fabric, state, request, 0.0)
        except NoCapacity:
            refused += 1
            continue
        jobs = {**jobs, job.job_id: job}
        add_job(fabric, jobs_bps, job)
        usage.add(job)
        used += request.gpu_count
    flows = _job_flows([(jid, job.flows) for jid, job in jobs.items()], workload, seed, demand)
    return Arm(flows, jobs, used, refused)
