"""Figures of the traffic that is not a steady elephant: each job's
iterations (time, algorithm and bus bandwidth, slowdown against the
optimum) and each finite flow's bursts (completion time, what arrived).
Pure: measured times in, figures out.

The optimum iteration time is a true lower bound: the job's own flows alone
on the live fabric, split over every path (fluid). All flows of an
iteration carry the same bytes B, and averaging any schedule that ends by T
gives a feasible multi-path flow of B/T per flow, so T >= B / lambda, where
lambda is the largest rate every flow can have at once: the minimum of the
max-min fair splittable optimum (exact, HiGHS). Other traffic only adds to
it, so nothing, however routed, finishes sooner.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from controller.fabric import Endpoint, Fabric
from controller.te.demand import nic_limited
from emulation.model.optimum import Outage, Units, concurrent_time_s
from emulation.model.stats import percentile
from emulation.scenarios.records import BurstFigures, Dispatch, JobFigures, OnOffFigures, OptimumStretch, Spread
from emulation.traffic.records import Iteration, StreamResult
from emulation.workload.expand import JobPlan, Plan

COLLIDED = 1.05  # the engine's own collision margin
Stretch = tuple[float, float, Outage]  # (start, end, what is down): the run's failure phases


def optimum_iteration_s(fabric: Fabric, plan: Plan, job: JobPlan, flow_bytes: int, outage: Outage) -> float | None:
    """The job's iteration lower bound (module doc), in the emulation's units; None: a flow has no live path."""
    pairs = [(plan.transfers[i].src, plan.transfers[i].dst) for i in job.transfers]
    time_s = concurrent_time_s(fabric, pairs, flow_bytes * 8.0, units=Units.EMULATED, outage=outage)
    return time_s if math.isfinite(time_s) else None


def collided_jobs(fabric: Fabric, plan: Plan, vias: Mapping[int, str]) -> dict[str, list[str]]:
    """Per job, the links its flows share with more than they can carry when
    every job iterates at once, routed over `vias` (transfer index -> spine):
    the load is each flow's NIC-limited rate (Hedera's estimate), a link is
    collided above 105 % of capacity with two flows or more on it."""
    jobs = [i for i in vias if plan.transfers[i].job]
    if not jobs:
        return {}
    rates = nic_limited([plan.transfers[i].src for i in jobs], [plan.transfers[i].dst for i in jobs], 1.0)
    paths = {i: fabric.egress_path(plan.transfers[i].src, plan.transfers[i].dst, vias[i] or None) for i in jobs}
    load: dict[Endpoint, float] = {}
    count: dict[Endpoint, int] = {}
    capacity = fabric.spec.rates.nic_gbps * 1e9
    for i, rate in zip(jobs, rates):
        for egress in paths[i][1:-1]:  # between the NICs' own links: where routing has a say
            load[egress] = load.get(egress, 0.0) + float(rate) * capacity
            count[egress] = count.get(egress, 0) + 1
    hot = {e for e, bps in load.items() if count[e] >= 2 and bps > COLLIDED * fabric.link_at(e).capacity_bps}
    out: dict[str, set[str]] = {}
    for i in jobs:
        out.setdefault(plan.transfers[i].job, set()).update(f"{e.node}:{e.port}" for e in paths[i] if e in hot)
    return {job: sorted(links) for job, links in out.items()}


def job_figures(
    fabric: Fabric,
    plan: Plan,
    iterations: Sequence[Iteration],
    stretches: Sequence[Stretch],
    emulated_flow_bytes: dict[str, int],
    underlay_vias: Mapping[int, str] | None = None,
) -> list[JobFigures]:
    """Per job with iterations; each iteration is judged against the optimum
    of the stretch it started in. With `underlay_vias` (the ECMP run's), the
    links ECMP overloads for each job."""
    collided = collided_jobs(fabric, plan, underlay_vias or {})
    out = []
    for job in plan.jobs:
        if not job.iterations or not job.transfers:  # a one-server job talks over NVLink, not the fabric
            continue
        mine = [it for it in iterations if it.job == job.job_id]
        size = emulated_flow_bytes[job.job_id]
        by_outage: dict[Outage, float | None] = {}
        for _, _, outage in stretches:
            if outage not in by_outage:
                by_outage[outage] = optimum_iteration_s(fabric, plan, job, size, outage)
        optimum = {(a, b): by_outage[outage] for a, b, outage in stretches}
        finished = [(it.start_s, it.end_s) for it in mine if it.end_s is not None]
        times = [end - start for start, end in finished]
        slowdowns = []
        for start, end in finished:
            # The fastest of the stretches it overlapped: an iteration that began
            # with a link down and ended after its repair may beat the first.
            bounds = [o for (a, b), o in optimum.items() if o and a < end and b > start]
            if bounds:
                slowdowns.append((end - start) / min(bounds))
        out.append(
            JobFigures(
                job=job.job_id,
                collective=job.collective.value,
                gpus=job.gpus,
                flows=len(job.transfers),
                message_bytes=job.message_bytes,
                flow_bytes=job.flow_bytes,
                iterations_planned=job.iterations,
                iterations_started=len(mine),
                iterations_finished=len(finished),
                iteration_s=spread(times),
                optimum_iteration_s=[OptimumStretch(a, b, o) for (a, b), o in optimum.items()],
                slowdown_vs_optimum=spread(slowdowns),
                # NCCL-tests: algbw = S / t; busbw = algbw x 2(n-1)/n (all-reduce), x (n-1)/n (all-to-all).
                algbw_gbytes_s=spread([job.message_bytes / t / 1e9 for t in times]),
                busbw_gbytes_s=spread([job.message_bytes / t / 1e9 * job.busbw_factor for t in times]),
                dispatch_overhead=Dispatch(
                    max_s=max((it.dispatch_s for it in mine), default=0.0),
                    max_share_of_iteration=max((it.dispatch_s / t for it in mine if (t := it.time_s)), default=0.0),
                ),
                times_s=[(it.start_s, it.time_s) for it in mine],
                slowdowns=slowdowns,
                ecmp_collided_links=collided.get(job.job_id, []) if underlay_vias else None,
            )
        )
    return out


def spread(values: Sequence[float]) -> Spread:
    if not values:
        return Spread(0)
    return Spread(
        n=len(values),
        mean=statistics.fmean(values),
        min=min(values),
        p50=percentile(values, 0.5),
        p99=percentile(values, 0.99),
        max=max(values),
    )


def burst_figures(plan: Plan, streams: Sequence[tuple[int, StreamResult]]) -> list[BurstFigures]:
    """Per traffic item, its finite flows' bursts (not jobs'): completion time
    from the burst's window opening to its last byte, and what arrived."""
    by_item: dict[int, list[tuple[float | None, float]]] = {}
    for index, result in streams:
        transfer = plan.transfers[index]
        if transfer.job or not result.stream.bytes:
            continue
        rows = by_item.setdefault(transfer.item, [])
        for burst in result.bursts:
            rows.append(
                (None if burst.done is None else burst.done - burst.released, burst.received / result.stream.bytes)
            )
    return [
        BurstFigures(
            item=item,
            bursts=len(rows),
            unfinished=sum(1 for t, _ in rows if t is None),
            completion_s=spread([t for t, _ in rows if t is not None]),
            delivered_share=spread([share for _, share in rows]),
        )
        for item, rows in sorted(by_item.items())
    ]


def on_off_figures(plan: Plan, streams: Sequence[tuple[int, StreamResult]], duration_s: float) -> list[OnOffFigures]:
    """Per traffic item, its on/off sources: what they carried while on."""
    by_item: dict[int, list[tuple[int, float]]] = {}
    for index, result in streams:
        transfer = plan.transfers[index]
        if not transfer.window.on_s:
            continue
        on_time = sum(stop - start for start, stop in transfer.window.bursts(duration_s))
        by_item.setdefault(transfer.item, []).append((sum(result.interval_bytes), on_time))
    return [
        OnOffFigures(item, len(rows), spread([8 * carried / on / 1e6 for carried, on in rows if on > 0]))
        for item, rows in sorted(by_item.items())
    ]
