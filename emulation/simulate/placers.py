"""Ways of placing a job mix, each a `Placer` for `emulation.workload.expand`
(JobRequest -> Placed, or None when it does not fit). Each keeps its own
GPU ledger between requests, as a scheduler does. Pure.

- `first_fit`: network-blind, the first servers (in pod, index order) with
  the rails free; the underlay hashes every flow.
- `topology`: what a topology-aware scheduler does (Slurm topology/tree,
  Kueue TAS): the fewest leaves (pods) possible, best fit, lowest index
  first, whole rail-aligned servers; blind to load, so the underlay still
  hashes every flow.
- Railyard's own is `emulation.workload.placers.railyard_placer` (the real
  `controller.te.placement.place`, as the intent service calls it), shared
  with the emulation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from controller.fabric import Fabric, NicId
from controller.te.demand import planned_flows
from controller.te.jobs import Gpu, Job, JobRequest
from controller.te.placement import FabricState, Usage, available_servers
from emulation.workload.expand import Placed, Placer

ServerKey = tuple[int, int]


def _hashed(fabric: Fabric, usage: Usage, request: JobRequest, servers: Sequence[ServerKey]) -> Placed:
    """The job on these servers (rails 0..k-1, GPUs ranked server by server),
    every flow left to the underlay's hash."""
    k = request.per_server(fabric.rails)
    ordered = sorted(servers)
    flows = planned_flows(request, ordered, k, fabric.spec.rates.nic_gbps * 1e9, None, fabric.spec.pods_per_cluster)
    gpus = tuple(Gpu(j * k + r, NicId(r, pod, idx)) for j, (pod, idx) in enumerate(ordered) for r in range(k))
    usage.add(Job(request, gpus, tuple(flows), 0.0, 0.0))
    return Placed(tuple(g.nic for g in gpus), tuple((f.src, f.dst, "", 0) for f in flows))


def chosen(fabric: Fabric, usage: Usage, request: JobRequest) -> Placed | None:
    """A job whose servers the scheduler named goes there in every arm (if
    their rails are free): only the routing differs."""
    keys = {s.name: (s.pod, s.index) for s in fabric.servers}
    servers = [keys[name] for name in request.servers]
    free = {key for ks in available_servers(fabric, FabricState(usage=usage), request).values() for key in ks}
    return _hashed(fabric, usage, request, servers) if set(servers) <= free else None


Pick = Callable[[dict[int, list[ServerKey]], int], list[ServerKey]]  # free servers by pod, how many -> chosen


def _scheduler(fabric: Fabric, pick: Pick) -> Placer:
    """A placer keeping its own GPU ledger, choosing servers by `pick`."""
    usage = Usage()

    def placer(request: JobRequest) -> Placed | None:
        if request.servers:
            return chosen(fabric, usage, request)
        m = request.server_count(fabric.rails)
        servers = pick(available_servers(fabric, FabricState(usage=usage), request), m)
        return _hashed(fabric, usage, request, servers) if len(servers) == m else None

    return placer


def _first_free(avail: dict[int, list[ServerKey]], m: int) -> list[ServerKey]:
    return [key for _, keys in sorted(avail.items()) for key in keys][:m]


def _packed(avail: dict[int, list[ServerKey]], m: int) -> list[ServerKey]:
    fitting = [pod for pod, keys in sorted(avail.items()) if len(keys) >= m]
    if fitting:
        # One pod: the tightest that fits (best fit keeps big pods whole), lowest index on a tie.
        pod = min(fitting, key=lambda p: (len(avail[p]), p))
        return avail[pod][:m]
    # Across pods: the fullest-free first, so the job spans as few as it can.
    servers: list[ServerKey] = []
    for pod in sorted(avail, key=lambda p: (-len(avail[p]), p)):
        servers += avail[pod][: m - len(servers)]
    return servers


def first_fit(fabric: Fabric) -> Placer:
    return _scheduler(fabric, _first_free)


def topology(fabric: Fabric) -> Placer:
    return _scheduler(fabric, _packed)
