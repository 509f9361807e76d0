"""Which servers and rails a job may take: the rail set its servers share,
and the candidate server sets placement then routes (placement.py). Pure.

A job smaller than a server goes where it fits tightest (the fewest GPUs
left free on its servers, anywhere in the fabric), so whole servers stay
whole for the jobs that need them; jobs of whole servers are packed into as
few pods as possible, preferring pods with headroom. The candidates: the
tightest single pod (two where traffic is measured, which is all that tells
single pods apart), the largest-pods-first packing, the fabric's tightest
servers, and plain first-fit; or the servers a request names; or, on a
three-tier fabric, the servers te/clusters.py chose across clusters.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.errors import Exhausted
from controller.fabric import Fabric
from controller.te.capacity import free_capacity, free_masks, server_table
from controller.te.clusters import ClusterView, plan_clusters
from controller.te.jobs import JobRequest
from controller.te.load import drained
from controller.te.patterns import ServerKey

if TYPE_CHECKING:  # placement.py imports this module; a FabricState is only read here
    from controller.te.placement import FabricState


class NoCapacity(Exhausted):
    """The fabric cannot hold the job now; the message says what is free and where."""


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
class Choice:
    rails: tuple[int, ...]
    avail: dict[int, list[ServerKey]]  # per pod, servers with the rails free, tightest fit first
    free: Mapping[ServerKey, int]  # free GPUs on those servers before this job
    # Three tiers: the clusters avail is confined to. Across more than one,
    # avail holds exactly the job's servers.
    clusters: tuple[int, ...] = ()


def choose(
    fabric: Fabric, state: FabricState, request: JobRequest, pod_load: Mapping[int, float] | None = None
) -> Choice:
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
        return Choice(tuple(range(k)), {}, {})
    keys = table.keys
    chosen_rows = rows[best[2]]
    free_of = dict(zip((keys[i] for i in chosen_rows.tolist()), free_count[chosen_rows].tolist()))
    avail: dict[int, list[ServerKey]] = defaultdict(list)
    for key in sorted(free_of, key=lambda key: (free_of[key], key)):
        avail[key[0]].append(key)
    return Choice(best[1], dict(avail), free_of, best[3])


def choose_rails(
    fabric: Fabric, state: FabricState, request: JobRequest
) -> tuple[tuple[int, ...], dict[int, list[ServerKey]]]:
    """The job's rails (the same on each of its servers) and, per pod, the
    servers that have them free, best fit first: a job smaller than a server
    goes where it leaves the fewest free GPUs behind, so whole servers stay
    whole for the jobs that need them. Full-server jobs take every rail."""
    choice = choose(fabric, state, request)
    return choice.rails, choice.avail


SINGLE_POD_CANDIDATES = 2


def _candidates(
    choice: Choice, m: int, max_pods: int, pod_load: Mapping[int, float], measured: bool
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


def free_gpus_by_pod(fabric: Fabric, state: FabricState) -> dict[int, int]:
    """GPUs no job holds, per pod (a server held exclusively has none free)."""
    return {pod.pod: pod.free_gpus for pod in free_capacity(fabric, state.gpu_ledger()).pods}


def free_summary(fabric: Fabric, state: FabricState, request: JobRequest) -> str:
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


def named_servers(fabric: Fabric, state: FabricState, request: JobRequest, avail: Mapping[Any, Any]) -> list[Any]:
    """The servers a request names, as keys; NoCapacity if any lacks the job's free rails."""
    by_name = {name: key for key, name in _servers_by_key(fabric).items()}
    keys = [by_name[name] for name in request.servers]
    free = {key for servers in avail.values() for key in servers}
    if busy := [name for name, key in zip(request.servers, keys) if key not in free]:
        k = request.per_server(fabric.rails)
        raise NoCapacity(
            f"{shape(fabric, request)}: server(s) {', '.join(busy)} lack free, undrained "
            f"rails 0-{k - 1}; " + free_summary(fabric, state, request)
        )
    return keys


def shape(fabric: Fabric, request: JobRequest) -> str:
    """The job as placement sees it, for messages: "N GPUs as m server(s) x k"."""
    k, m = request.per_server(fabric.rails), request.server_count(fabric.rails)
    return f"{request.gpu_count} GPUs as {m} server(s) x {k}"


def candidate_sets(
    fabric: Fabric, state: FabricState, request: JobRequest, pod_load: Mapping[int, float]
) -> tuple[Choice, list[list[ServerKey]], list[ServerKey] | None]:
    """(the rails and their free servers, the candidate server sets, the
    first-fit set where it is one of them); NoCapacity if there is none."""
    k, m = request.per_server(fabric.rails), request.server_count(fabric.rails)
    if request.servers:
        choice = Choice(tuple(range(k)), available_servers(fabric, state, request), {})
        return choice, [named_servers(fabric, state, request, choice.avail)], None
    choice = choose(fabric, state, request, pod_load)
    if len(choice.clusters) > 1:
        # Across clusters the servers are already chosen (te/clusters.py):
        # routed both ways, so never worse than hashing them.
        spread = sorted(key for servers in choice.avail.values() for key in servers)
        return choice, [spread], spread
    candidates, first_fit = _candidates(choice, m, request.max_pods, pod_load, bool(state.measured_bps))
    if not candidates:
        limit = f" within {request.max_pods} pod(s)" if request.max_pods else ""
        raise NoCapacity(f"{shape(fabric, request)}{limit} does not fit: " + free_summary(fabric, state, request))
    return choice, candidates, first_fit
