"""A job mix, drawn from its seed: the jobs it asks the placement for, and
the one-server jobs from outside the scenario that hold servers first."""

from __future__ import annotations

import random

from controller.fabric import Fabric
from controller.fabric import addressing as ad
from controller.te.jobs import JobRequest, Pattern
from emulation.workload.model import JobMixItem, WorkloadError


def background_requests(fabric: Fabric, mix: JobMixItem, seed: int) -> list[JobRequest]:
    """One-server jobs holding `background` of the servers, drawn from the
    seed: each names its server, so every placement puts it there."""
    servers = sorted({(n.pod, n.server) for n in fabric.nics})
    held = sorted(random.Random(f"background-{seed}").sample(servers, round(mix.background * len(servers))))
    return [
        JobRequest(f"held-{i:04d}", fabric.rails, Pattern.RING, 0.0, servers=(ad.server_name(pod, server),))
        for i, (pod, server) in enumerate(held)
    ]


def job_requests(fabric: Fabric, mix: JobMixItem, seed: int, where: str) -> list[JobRequest]:
    """Jobs drawn from the mix until `fill` of the GPUs are asked for."""
    rails = fabric.rails
    for size, _ in mix.sizes:
        k = min(size, rails)
        if size > fabric.gpu_count or size % k:
            raise WorkloadError(
                f"{where}.sizes.{size}",
                f"{size} GPUs do not fit fabric {fabric.spec.name!r} as whole servers",
                f"up to {rails} GPUs, or a multiple of {rails} up to {fabric.gpu_count}",
            )
    rng = random.Random(seed)
    sizes, size_weights = zip(*mix.sizes)
    patterns, pattern_weights = zip(*mix.collectives)
    target = mix.fill * fabric.gpu_count
    smallest = min(sizes)
    out: list[JobRequest] = []
    asked = misses = 0
    while asked < target and fabric.gpu_count - asked >= smallest and misses < 100:
        size = rng.choices(sizes, size_weights)[0]
        pattern = rng.choices(patterns, pattern_weights)[0]
        if asked + size > fabric.gpu_count:
            misses += 1
            continue
        if pattern is Pattern.ALL_TO_ALL and size > mix.all_to_all_max_gpus:
            pattern = Pattern.RING
        flow_gbps = min(mix.flow_gbps, fabric.spec.rates.nic_gbps)
        out.append(
            JobRequest(f"job-{len(out):04d}", size, pattern, flow_gbps, qps_per_connection=mix.qps_per_connection)
        )
        asked += size
    return out
