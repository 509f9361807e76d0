"""Iteration times per job and arm, against the optimum. Pure.

Per job and over all jobs: p50/p99/max iteration time, algbw = message
bytes / iteration time and busbw = algbw x the collective's factor (NCCL
tests' definitions, emulation.workload.expand), and the slowdown against
the optimum (jobbound.py), iteration by iteration. The optimum of a job is
the lowest bound over the placements the arms ran it on, so it bounds
every arm; an arm below it is a bug (`OptimumBeaten`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from controller.errors import RailyardError
from emulation.model.stats import percentile
from emulation.simulate.conditions import Condition
from emulation.simulate.jobbound import Cuts, JobBound, job_bound
from emulation.simulate.prepared import Prepared
from emulation.simulate.records import ArmFigures, BurstFigures, IterationFigures
from emulation.simulate.timeline import Burst, Iteration
from emulation.workload.expand import JobPlan

# An arm's iteration is below the optimum only by rounding (the LP's
# feasibility tolerance, the timeline's float steps) or by a bug.
BEATEN_TOLERANCE = 1e-6


class OptimumBeaten(RailyardError):
    """An arm ran an iteration faster than the job's optimum allows: a bug in the model or the bound."""


Bounds = dict[str, dict[tuple[str, ...], JobBound]]  # job -> dead links -> its bound


def placement_bounds(prep: Prepared, cuts: Cuts, conditions: Sequence[Condition]) -> Bounds:
    """Per job of this placement and set of dead links it may meet: its bound."""
    flows = prep.arm.flows
    deads = sorted({c.dead for c in conditions})
    capacities = {dead: cuts.network.capacity_without(dead) for dead in deads}
    out: Bounds = {}
    for job in prep.arm.jobs:
        if job.iterations and job.transfers:
            pairs = [(flows[i].src, flows[i].dst) for i in job.transfers]
            bits = job.flow_bytes * 8.0
            out[job.job_id] = {dead: job_bound(cuts, pairs, bits, dead, capacities[dead]) for dead in deads}
    return out


def lowest(per_placement: Sequence[Bounds]) -> Bounds:
    """Per job and dead links, the lowest bound over the placements: it bounds every arm."""
    out: Bounds = {}
    for bounds in per_placement:
        for job, per in bounds.items():
            mine = out.setdefault(job, {})
            for dead, bound in per.items():
                if dead not in mine or bound.time_s < mine[dead].time_s:
                    mine[dead] = bound
    return out


def iteration_bound(
    bounds: Mapping[tuple[str, ...], JobBound], conditions: Sequence[Condition], iteration: Iteration
) -> float:
    """The least the iteration could take: the fastest condition it overlapped."""
    ends = [c.start_s for c in conditions[1:]] + [math.inf]
    met = [
        bounds[c.dead].time_s
        for c, end in zip(conditions, ends)
        if c.start_s < iteration.end_s and end > iteration.start_s and c.dead in bounds
    ]
    return min(met, default=0.0)


def _figures(times: Sequence[float], slowdowns: Sequence[float], job: JobPlan | None, **extra: Any) -> IterationFigures:
    """Iteration times and slowdowns; for a job that ran, its algbw and busbw at p50 and p99."""
    p50, p99 = percentile(times, 0.5), percentile(times, 0.99)

    def gbps(seconds: float, factor: float) -> float | None:
        if job is None or not times:
            return None
        return job.message_bytes * 8 / seconds * factor / 1e9 if seconds > 0 else 0.0

    busbw = job.busbw_factor if job is not None else 1.0
    return IterationFigures(
        len(times), p50, p99, max(times, default=0.0),
        percentile(slowdowns, 0.5), percentile(slowdowns, 0.99), max(slowdowns, default=0.0),
        gpus=job.gpus if job else None,
        collective=job.collective.value if job else None,
        message_bytes=job.message_bytes if job else None,
        algbw_p50_gbps=gbps(p50, 1.0), busbw_p50_gbps=gbps(p50, busbw),
        algbw_p99_gbps=gbps(p99, 1.0), busbw_p99_gbps=gbps(p99, busbw),
        **extra,
    )  # fmt: skip


def arm_figures(
    iterations: Sequence[Iteration],
    unfinished: Sequence[Iteration],
    jobs: Sequence[JobPlan],
    bounds: Bounds,
    own: Bounds,
    conditions: Sequence[Condition],
    arm: str,
) -> tuple[dict[str, IterationFigures], IterationFigures]:
    """Per job and overall, against the optimum (`bounds`, over all
    placements) and with the bound of the arm's own placement beside it
    (`own`: what routing alone could reach there). An iteration still
    running at the end counts with its time so far once that is past the
    optimum: a lower bound on its time, so a stalled job is not hidden by
    having finished nothing. Raises OptimumBeaten if an iteration beats its
    bound."""
    by_job: dict[str, list[tuple[float, float]]] = {}
    late = [it for it in unfinished if it.time_s >= iteration_bound(bounds.get(it.job, {}), conditions, it) > 0]
    for it in [*iterations, *late]:
        bound = iteration_bound(bounds.get(it.job, {}), conditions, it)
        if it.time_s < bound * (1 - BEATEN_TOLERANCE):
            raise OptimumBeaten(
                f"{arm}: {it.job} iteration {it.index} took {it.time_s:.6f} s, below its optimum {bound:.6f} s"
            )
        by_job.setdefault(it.job, []).append((it.time_s, it.time_s / bound if bound > 0 else 0.0))
    per_job = {}
    for job in jobs:
        rows = by_job.get(job.job_id, [])
        placed = own.get(job.job_id)
        per_job[job.job_id] = _figures(
            [t for t, _ in rows],
            [s for _, s in rows],
            job,
            own_optimum_s=min(b.time_s for b in placed.values()) if placed else 0.0,
            unfinished_counted=sum(1 for it in late if it.job == job.job_id),
            times_s=[round(t, 6) for t, _ in rows],
        )
    every = [row for rows in by_job.values() for row in rows]
    return per_job, _figures([t for t, _ in every], [s for _, s in every], None)


def optimum_figures(jobs: Sequence[JobPlan], bounds: Bounds, rule: str) -> ArmFigures:
    """The optimum as an arm: per job its bound in the healthiest condition and how it was found."""
    per_job = {}
    for job in jobs:
        found = bounds.get(job.job_id)
        if not found:
            continue
        best = min(found.values(), key=lambda b: b.time_s)
        per_job[job.job_id] = _figures([best.time_s], [1.0], job, method=best.method)
    times = [f.p50_s for f in per_job.values()]
    methods = sorted({f.method or "" for f in per_job.values()})
    overall = _figures(times, [1.0] * len(times), None, method="+".join(methods))
    return ArmFigures(rule=rule, jobs=per_job, overall=overall)


def burst_figures(bursts: Sequence[Burst]) -> BurstFigures | None:
    """Completion times of the finite flows outside jobs (none: None)."""
    if not bursts:
        return None
    times = [b.end_s - b.start_s for b in bursts if b.end_s is not None]
    return BurstFigures(
        len(times), len(bursts) - len(times), percentile(times, 0.5), percentile(times, 0.99), max(times, default=0.0)
    )
